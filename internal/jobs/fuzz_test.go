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
