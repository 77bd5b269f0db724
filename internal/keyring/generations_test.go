package keyring

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Rotate makes a new local KEK and keeps the old one as a generation that
// still opens what it wrapped; a second KEK on the same directory (another
// replica) follows at its next use; a stale rotation changes nothing;
// DestroyGeneration overwrites and removes the old key.
func TestLocalKEKRotation(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	a, err := Open(t.Context(), "", dir)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	key, wrapped, err := a.NewDataKey(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(t.Context(), "", dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	old, _ := a.Fingerprint()
	if fp, _ := b.Fingerprint(); fp != old {
		t.Fatalf("replica's KEK %s, want %s", fp, old)
	}
	if !a.Rotatable() {
		t.Fatal("a local KEK is not rotatable")
	}
	rotated, err := a.Rotate(old)
	if err != nil || !rotated {
		t.Fatalf("Rotate: %v, %v", rotated, err)
	}
	now, _ := a.Fingerprint()
	if now == old {
		t.Fatal("the fingerprint did not change")
	}
	if fp, _ := b.Fingerprint(); fp != now {
		t.Fatalf("the replica still uses %s after the rotation, want %s", fp, now)
	}
	if again, err := b.Rotate(old); err != nil || again {
		t.Fatalf("a second rotation from the old KEK: %v, %v; want nothing done", again, err)
	}
	if _, err := a.Unwrap(t.Context(), wrapped); !errors.Is(err, ErrUnwrap) {
		t.Fatalf("the new KEK opens the old wrapping: %v", err)
	}
	gens, err := a.Generations()
	if err != nil || len(gens) != 1 || gens[0] != old {
		t.Fatalf("Generations: %v, %v; want [%s]", gens, err, old)
	}
	g, err := b.Generation(old)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := g.Unwrap(t.Context(), wrapped); err != nil || !bytes.Equal(got, key) {
		t.Fatalf("the generation does not open what it wrapped: %v", err)
	}
	path := filepath.Join(dir, "kek-"+old+".key")
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("generation file: %v, %v; want mode 0600", st, err)
	}
	if err := a.DestroyGeneration(old); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the generation's file is still there: %v", err)
	}
	if _, err := a.Generation(old); !errors.Is(err, ErrNoKEK) {
		t.Fatalf("Generation after its destruction: %v, want ErrNoKEK", err)
	}
	if err := a.DestroyGeneration(old); err != nil {
		t.Fatalf("destroying it twice: %v", err)
	}
	for _, bad := range []string{"../kek", "ABCDEF0123456789", ""} {
		if _, err := a.Generation(bad); !errors.Is(err, ErrNoKEK) {
			t.Errorf("Generation(%q): %v; a fingerprint that is not 16 lowercase hex digits names no file", bad, err)
		}
	}
}

// A KMS key, or a retiring file the operator named, is not the server's
// to rotate.
func TestOnlyTheLocalKEKRotates(t *testing.T) {
	k, err := Open(t.Context(), "base64key://"+"AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=", "")
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if k.Rotatable() {
		t.Fatal("a keeper KEK is rotatable")
	}
	if _, err := k.Rotate("x"); err == nil {
		t.Fatal("a keeper KEK rotated")
	}
}
