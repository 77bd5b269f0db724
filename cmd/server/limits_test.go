package main

import (
	"reflect"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/contentbackup/contentbackup/internal/server"
)

// TestLimitFlagDefaultsAreTheServers: every limit flag's default is the
// server's own default (RELIABILITY.md lists one value for each), so a
// server started with no flags runs under the documented limits.
func TestLimitFlagDefaultsAreTheServers(t *testing.T) {
	var f struct{ limitFlags }
	parser, err := kong.New(&f, kong.Exit(func(int) { t.Fatal("kong exited") }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parser.Parse(nil); err != nil {
		t.Fatal(err)
	}
	got := f.limits(server.DefaultLimits.CallExpandBytes)
	want := server.DefaultLimits
	if !reflect.DeepEqual(got, want) {
		t.Errorf("flags give\n%+v\nthe server's defaults are\n%+v", got, want)
	}
}
