package jobs

import (
	"strings"
	"testing"
)

// FuzzCheckObjectKey: an object key a caller names is accepted only when
// no segment can climb out of, or stay at, the bucket's root, and nothing
// in it is unprintable; the check never panics.
func FuzzCheckObjectKey(f *testing.F) {
	for _, seed := range []string{"a", "alice/2026.xmtpbak", "../x", "a/./b", "a//b", "/abs", "x" + SidecarSuffix, "a\x00b", "\u202e", "%2e%2e/x"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if CheckObjectKey(key) != nil {
			return
		}
		for _, seg := range strings.Split(key, "/") {
			if seg == "" || seg == "." || seg == ".." {
				t.Fatalf("accepted %q with segment %q", key, seg)
			}
		}
		if strings.ContainsAny(key, "\x00\n\r\t ") || len(key) > maxObjectKey {
			t.Fatalf("accepted %q", key)
		}
	})
}

// FuzzJobID: an operation name is accepted only as operations/ and 32
// lowercase hex digits, and the id it gives names it again.
func FuzzJobID(f *testing.F) {
	for _, seed := range []string{"operations/18edb1feabe826e344714986db5e6a6f", "operations/", "operations/../x", "x"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, name string) {
		id, err := JobID(name)
		if err != nil {
			return
		}
		if OperationName(id) != name || len(id) != 32 {
			t.Fatalf("JobID(%q) = %q", name, id)
		}
	})
}
