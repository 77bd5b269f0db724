package keyring

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A data key round-trips through the local KEK, which is made on the
// first wrap with mode 0600 and read by a second KEK on the same file.
func TestLocalKEKWrapsFreshKeys(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	k, err := Open(t.Context(), "", dir)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if _, err := k.Unwrap(t.Context(), []byte("x")); !errors.Is(err, ErrNoKEK) {
		t.Fatalf("Unwrap before any KEK: %v, want ErrNoKEK", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the key directory was made by a read: %v", err)
	}
	key1, wrapped1, err := k.NewDataKey(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	key2, wrapped2, err := k.NewDataKey(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(key1) != 32 || bytes.Equal(key1, key2) || bytes.Equal(wrapped1, wrapped2) || bytes.Contains(wrapped1, key1) {
		t.Fatalf("data keys are not fresh and wrapped: %x %x", key1, key2)
	}
	st, err := os.Stat(filepath.Join(dir, KEKFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("KEK file: %v, %v; want mode 0600", st, err)
	}
	other, err := Open(t.Context(), "", dir)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	got, err := other.Unwrap(t.Context(), wrapped1)
	if err != nil || !bytes.Equal(got, key1) {
		t.Fatalf("Unwrap = %x, %v; want %x", got, err, key1)
	}
	damaged := bytes.Clone(wrapped2)
	damaged[len(damaged)-1] ^= 1
	if _, err := other.Unwrap(t.Context(), damaged); !errors.Is(err, ErrUnwrap) {
		t.Fatalf("Unwrap of a damaged key: %v, want ErrUnwrap", err)
	}
}

// A KMS keeper (base64key:// stands in for one) wraps; another KMS key
// does not open what it wrapped.
func TestKMSKEK(t *testing.T) {
	k, err := Open(t.Context(), "base64key://smGbjm71Nxd1Ig5FS0wj9SlbzAIrnolCz9bQQ6uAhl4=", "")
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if !k.KMS() {
		t.Fatal("KMS() = false")
	}
	key, wrapped, err := k.NewDataKey(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := k.Unwrap(t.Context(), wrapped); err != nil || !bytes.Equal(got, key) {
		t.Fatalf("Unwrap = %x, %v", got, err)
	}
	other, err := Open(t.Context(), "base64key://AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", "")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Unwrap(t.Context(), wrapped); !errors.Is(err, ErrUnwrap) {
		t.Fatalf("Unwrap under another KMS key: %v, want ErrUnwrap", err)
	}
	if _, err := Open(t.Context(), "nosuch://secret-in-url", ""); err == nil || bytes.Contains([]byte(err.Error()), []byte("secret-in-url")) {
		t.Fatalf("Open of a bad URL: %v; want an error naming the scheme only", err)
	}
}
