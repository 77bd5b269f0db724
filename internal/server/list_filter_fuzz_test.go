package server

import (
	"strings"
	"testing"
)

// FuzzListFilter: ListOperations' filter parser never panics, and what it
// accepts names only the fields it knows.
func FuzzListFilter(f *testing.F) {
	for _, seed := range []string{"", `owner = "alice"`, `done = true`, `owner="a" AND done=false`, `state = 1`, `owner = alice`, `owner = "`, " AND "} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, filter string) {
		lf, err := parseFilter(filter)
		if err != nil {
			return
		}
		if lf.owner != "" && !strings.Contains(filter, lf.owner) {
			t.Fatalf("parseFilter(%q) gave owner %q", filter, lf.owner)
		}
	})
}
