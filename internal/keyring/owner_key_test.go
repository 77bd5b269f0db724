package keyring

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func fixedKey(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

// TestSealedDataKeyIsBoundToItsRow (issue 37): a data key sealed by an
// owner key opens only under that owner key and for the (owner, backup)
// it was sealed for: moved to another row, opened with another owner's
// key, truncated or flipped, it is ErrUnwrap. Two seals of one key
// differ (a fresh nonce each).
func TestSealedDataKeyIsBoundToItsRow(t *testing.T) {
	owner, data := fixedKey(1), fixedKey(2)
	sealed, err := SealDataKey(owner, data, "alice", "b1")
	if err != nil {
		t.Fatal(err)
	}
	if len(sealed) != 1+12+32+16 || sealed[0] != sealedVersion || bytes.Contains(sealed, data) {
		t.Fatalf("sealed form: %x", sealed)
	}
	again, _ := SealDataKey(owner, data, "alice", "b1")
	if bytes.Equal(sealed, again) {
		t.Error("two seals of one key are equal: the nonce is not fresh")
	}
	if got, err := OpenDataKey(owner, sealed, "alice", "b1"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("OpenDataKey: %x, %v", got, err)
	}
	flipped := bytes.Clone(sealed)
	flipped[len(flipped)-1] ^= 1
	for name, c := range map[string]struct {
		key, sealed   []byte
		owner, backup string
	}{
		"another owner's key":   {fixedKey(3), sealed, "alice", "b1"},
		"another owner":         {owner, sealed, "alicf", "b1"},
		"another backup":        {owner, sealed, "alice", "b2"},
		"the boundary moved":    {owner, sealed, "aliceb", "1"},
		"truncated":             {owner, sealed[:len(sealed)-1], "alice", "b1"},
		"a flipped bit":         {owner, flipped, "alice", "b1"},
		"another version":       {owner, append([]byte{2}, sealed[1:]...), "alice", "b1"},
		"a short owner key":     {owner[:31], sealed, "alice", "b1"},
		"nothing (erased rows)": {owner, nil, "alice", "b1"},
	} {
		if _, err := OpenDataKey(c.key, c.sealed, c.owner, c.backup); !errors.Is(err, ErrUnwrap) {
			t.Errorf("%s: %v, want ErrUnwrap", name, err)
		}
	}
}

// TestRetiringKEKIsNeverMade (issue 37): a retiring KEK names a file that
// must exist (a typo is refused at start, never a fresh key), keeps its
// fingerprint when moved aside, and wraps what the current one unwraps.
func TestRetiringKEKIsNeverMade(t *testing.T) {
	dir := t.TempDir()
	k, err := Open(t.Context(), "", dir)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	key, wrapped, err := k.NewDataKey(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	fp, _ := k.Fingerprint()
	if _, err := OpenRetiring(t.Context(), filepath.Join(dir, "missing.key")); !errors.Is(err, ErrNoKEK) {
		t.Fatalf("a retiring KEK that does not exist: %v, want ErrNoKEK", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "missing.key")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("OpenRetiring made a key")
	}
	moved := filepath.Join(dir, "old.key")
	if err := os.Rename(filepath.Join(dir, KEKFile), moved); err != nil {
		t.Fatal(err)
	}
	old, err := OpenRetiring(t.Context(), moved)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if got, _ := old.Fingerprint(); got != fp {
		t.Errorf("the moved KEK's fingerprint %s, was %s", got, fp)
	}
	if got, err := old.Unwrap(t.Context(), wrapped); err != nil || !bytes.Equal(got, key) {
		t.Fatalf("the retiring KEK unwraps what it wrapped: %v", err)
	}
}

// FuzzOpenDataKey: a sealed key is read from a catalog row, which a
// database dump or a damaged row may make anything: never a panic, and
// anything but the sealed form is refused.
func FuzzOpenDataKey(f *testing.F) {
	owner := fixedKey(7)
	good, _ := SealDataKey(owner, fixedKey(8), "o", "b")
	f.Add(good, "o", "b")
	f.Add([]byte{}, "o", "b")
	f.Add([]byte{1}, "", "")
	f.Add(bytes.Repeat([]byte{1}, 61), "o", "b")
	f.Fuzz(func(t *testing.T, sealed []byte, o, b string) {
		key, err := OpenDataKey(owner, sealed, o, b)
		// Only a seal made for ("o", "b") under owner opens: each process
		// of the fuzzer seals its own seed under a fresh nonce.
		if err == nil && (o != "o" || b != "b" || !bytes.Equal(key, fixedKey(8))) {
			t.Fatalf("opened %x for (%q, %q)", sealed, o, b)
		}
	})
}

// TestSealRefusesAKeyOfTheWrongSize: only 32-byte data keys are sealed,
// so every sealed key has the one length OpenDataKey takes.
func TestSealRefusesAKeyOfTheWrongSize(t *testing.T) {
	for _, n := range []int{0, 16, 31, 33} {
		if _, err := SealDataKey(fixedKey(1), make([]byte, n), "o", "b"); err == nil {
			t.Errorf("a %d-byte data key was sealed", n)
		}
	}
}

// TestFingerprintNeedsTheKEK: a local KEK not made yet has no
// fingerprint (ErrNoKEK), and asking makes none; a keeper URL is named by
// its scheme only in errors.
func TestFingerprintNeedsTheKEK(t *testing.T) {
	dir := t.TempDir()
	k, err := Open(t.Context(), "", dir)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if fp, err := k.Fingerprint(); !errors.Is(err, ErrNoKEK) || fp != "" {
		t.Fatalf("the fingerprint of a KEK not made: %q, %v", fp, err)
	}
	if _, err := os.Stat(filepath.Join(dir, KEKFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("asking for the fingerprint made a KEK")
	}
	for in, want := range map[string]string{"base64key://c2VjcmV0": "base64key://...", "://x": "://...", "no-scheme": "(no scheme)"} {
		if got := schemeOf(in); got != want {
			t.Errorf("schemeOf(%q) = %q, want %q", in, got, want)
		}
	}
}
