package jobs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"gocloud.dev/secrets"

	"github.com/contentbackup/contentbackup/internal/archive"
)

// ErrUnknownKey: no key of that name is held.
var ErrUnknownKey = errors.New("no such key")

// keyName is what a key reference may be: a file name with no path in it.
var keyName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// KeyFileSuffix ends every key file's name: <dir>/<name>.key.
const KeyFileSuffix = ".key"

// KeyRing is the archive keys jobs may name: one file a key in a
// directory, each wrapped by a keeper (a KMS key, through
// gocloud.dev/secrets) or, without one, 32 raw bytes or 64 hex characters.
// A job stores the key's name only; the key is read when the job starts
// and kept in memory for its run.
type KeyRing struct {
	dir    string
	keeper *secrets.Keeper
}

// OpenKeyRing reads keys from dir, unwrapping them with the keeper at
// keeperURL when it is set.
func OpenKeyRing(ctx context.Context, dir, keeperURL string) (*KeyRing, error) {
	k := &KeyRing{dir: dir}
	if keeperURL != "" {
		keeper, err := secrets.OpenKeeper(ctx, keeperURL)
		if err != nil {
			// The URL may hold a key (base64key://): name the scheme only.
			return nil, fmt.Errorf("key keeper %s: %w", schemeOf(keeperURL), err)
		}
		k.keeper = keeper
	}
	return k, nil
}

func schemeOf(url string) string {
	if i := strings.Index(url, "://"); i >= 0 {
		return url[:i] + "://..."
	}
	return "(no scheme)"
}

// Wrapped reports whether the ring unwraps its keys with a keeper.
func (k *KeyRing) Wrapped() bool { return k.keeper != nil }

// CheckKeyRef checks the form of a key reference.
func CheckKeyRef(ref string) error {
	if !keyName.MatchString(ref) {
		return fmt.Errorf("key_ref %.64q: a key name is 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit", ref)
	}
	return nil
}

// Key returns the 32-byte archive key named ref.
func (k *KeyRing) Key(ctx context.Context, ref string) ([]byte, error) {
	if err := CheckKeyRef(ref); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(k.dir, ref+KeyFileSuffix))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("key_ref %q: %w", ref, ErrUnknownKey)
	}
	if err != nil {
		return nil, fmt.Errorf("key %q: %w", ref, err)
	}
	if k.keeper != nil {
		if b, err = k.keeper.Decrypt(ctx, b); err != nil {
			return nil, fmt.Errorf("key %q: unwrap: %w", ref, err)
		}
	}
	key, err := archive.ParseKey(b)
	if err != nil {
		return nil, fmt.Errorf("key %q: %w", ref, err)
	}
	return key, nil
}

// WrapKey encrypts key with the keeper at keeperURL, for a key file of a
// ring that unwraps with it.
func WrapKey(ctx context.Context, keeperURL string, key []byte) ([]byte, error) {
	keeper, err := secrets.OpenKeeper(ctx, keeperURL)
	if err != nil {
		return nil, fmt.Errorf("key keeper %s: %w", schemeOf(keeperURL), err)
	}
	defer keeper.Close()
	return keeper.Encrypt(ctx, key)
}

// Close releases the keeper.
func (k *KeyRing) Close() error {
	if k.keeper != nil {
		return k.keeper.Close()
	}
	return nil
}
