// Package keyring seals backups under a three-level key hierarchy: each
// backup gets a fresh 32-byte archive key (its data key), sealed by its
// owner's own key (SealDataKey), which is kept only wrapped by the
// server's key-encryption key (KEK), the way AWS KMS data keys and
// restic's master key over data keys work. A KMS key (gocloud.dev/secrets:
// awskms://, gcpkms://, azurekeyvault://, hashivault://) is the KEK in
// production; without one the KEK is 32 random bytes in a local file,
// made on first use.
//
// The owner key is the unit of erasure: destroying it makes every data
// key of the owner unreadable, wherever a copy of an object or a catalog
// row lives. The KEK is the unit of rotation: rewrapping the owner keys
// under a new KEK changes only their rows, never an archive.
//
// A data key never leaves the server except through the audited
// BackupService.GetBackupKey, so knowing a key's name, or any other
// backup's key, opens no other backup.
package keyring

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"gocloud.dev/gcerrors"
	"gocloud.dev/secrets"
	"gocloud.dev/secrets/localsecrets"

	"github.com/contentbackup/contentbackup/internal/archive"
	"github.com/contentbackup/contentbackup/internal/fault"
)

// ErrUnwrap: a wrapped data key does not open under the KEK (another
// KEK, a damaged row, a KEK file replaced). Retrying never helps.
var ErrUnwrap = fault.NewReason(fault.FailedPrecondition, fault.ReasonBackupDamaged, "the backup's data key does not open under this server's key-encryption key")

// ErrNoKEK: the local KEK file is missing, so no backup sealed under it
// can be opened. Retrying never helps.
var ErrNoKEK = fault.NewReason(fault.FailedPrecondition, fault.ReasonKeyUnavailable, "the key-encryption key file is missing")

// ErrBadKEK: the local KEK file is not a key (a file replaced by
// something else). Retrying never helps.
var ErrBadKEK = fault.NewReason(fault.FailedPrecondition, fault.ReasonKeyUnavailable, "the key-encryption key file does not hold a 32-byte key")

// KEKFile is the local KEK's file name in its directory.
const KEKFile = "kek.key"

// KEK wraps and unwraps data keys.
type KEK struct {
	kms keeper // set when a KMS key is the KEK
	// inProcess: the keeper decrypts in this process (base64key://), so
	// every failure is the ciphertext's.
	inProcess bool

	dir string // the local KEK's directory otherwise
	// file is the local KEK's file name in dir (KEKFile unless a
	// retiring KEK's own file was named).
	file string
	// existing: a retiring KEK, never made when its file is missing.
	existing bool
	mu       sync.Mutex
	local    keeper
	// loaded is the file local was read from: a rotation (here or by
	// another replica sharing the directory) replaces the file, and the
	// next use reads the new one.
	loaded os.FileInfo
	// fingerprint names the KEK without revealing it: for a KMS key, of
	// its keeper URL; for the local key, of the key.
	fingerprint string
}

type keeper interface {
	Encrypt(ctx context.Context, plaintext []byte) ([]byte, error)
	Decrypt(ctx context.Context, ciphertext []byte) ([]byte, error)
	Close() error
}

// Open returns the KEK: the keeper at keeperURL when it is set, else a
// local key in dir/kek.key (read, or made on first wrap).
func Open(ctx context.Context, keeperURL, dir string) (*KEK, error) {
	if keeperURL == "" {
		return &KEK{dir: dir, file: KEKFile}, nil
	}
	k, err := secrets.OpenKeeper(ctx, keeperURL)
	if err != nil {
		// The URL may hold a key (base64key://), and the driver's error
		// may repeat it: name the scheme only.
		return nil, fmt.Errorf("key keeper %s: %s", schemeOf(keeperURL), strings.ReplaceAll(err.Error(), keeperURL, schemeOf(keeperURL)))
	}
	return &KEK{kms: k, inProcess: strings.HasPrefix(keeperURL, localsecrets.Scheme+"://"), fingerprint: fingerprintOf("keeper", []byte(keeperURL))}, nil
}

// fingerprintOf is a KEK's name in the catalog: 16 hex digits of a keyed
// hash, which tells nothing of the key but changes with it.
func fingerprintOf(kind string, b []byte) string {
	m := hmac.New(sha256.New, []byte("contentbackup kek fingerprint "+kind))
	m.Write(b)
	return hex.EncodeToString(m.Sum(nil)[:8])
}

// Path is the local KEK's file ("" for a KMS key), for errors that name it.
func (k *KEK) Path() string {
	if k.kms != nil {
		return ""
	}
	return filepath.Join(k.dir, k.file)
}

// OpenRetiring returns a KEK being rotated away from: a keeper URL (it
// holds "://") or the path of a local key file, which must exist. The
// server unwraps with it what it still wraps, and wraps nothing new.
func OpenRetiring(ctx context.Context, spec string) (*KEK, error) {
	if strings.Contains(spec, "://") {
		return Open(ctx, spec, "")
	}
	k := &KEK{dir: filepath.Dir(spec), file: filepath.Base(spec), existing: true}
	if _, err := k.keeper(false); err != nil {
		return nil, err
	}
	return k, nil
}

// Fingerprint names the KEK, as each catalog row records it. A local KEK
// that does not exist yet is ErrNoKEK: create it with NewDataKey.
func (k *KEK) Fingerprint() (string, error) {
	if _, err := k.keeper(false); err != nil {
		return "", err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.fingerprint, nil
}

func schemeOf(url string) string {
	if i := strings.Index(url, "://"); i >= 0 {
		return url[:i] + "://..."
	}
	return "(no scheme)"
}

// KMS reports whether the KEK is a KMS key rather than a local file.
func (k *KEK) KMS() bool { return k.kms != nil }

// keeper returns the KEK's keeper; the local one is read from its file,
// and made when create is set and there is none.
func (k *KEK) keeper(create bool) (keeper, error) {
	if k.kms != nil {
		return k.kms, nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	path := filepath.Join(k.dir, k.file)
	if k.local != nil {
		st, err := os.Stat(path)
		if err == nil && os.SameFile(st, k.loaded) && st.ModTime().Equal(k.loaded.ModTime()) {
			return k.local, nil
		}
		if err != nil {
			// The file removed while the server runs: the key read
			// stays in use (never a new one made in its place, which
			// would wrap new rows under a key the others are not
			// under); the next start refuses the mismatch.
			return k.local, nil
		}
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && create && !k.existing {
		b, err = makeLocalKEK(k.dir, path)
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", path, ErrNoKEK)
	}
	if err != nil {
		return nil, fmt.Errorf("key-encryption key: %w", err)
	}
	key, err := archive.ParseKey(b)
	if err != nil {
		return nil, fmt.Errorf("key-encryption key %s: %w: %w", path, ErrBadKEK, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("key-encryption key: %w", err)
	}
	if k.local != nil {
		_ = k.local.Close()
	}
	k.local, k.loaded = localsecrets.NewKeeper([32]byte(key)), st
	k.fingerprint = fingerprintOf("local", key)
	return k.local, nil
}

// makeLocalKEK writes 32 random bytes to path, readable by the server
// only; a file another replica made first wins.
func makeLocalKEK(dir, path string) ([]byte, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return os.ReadFile(path)
	}
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(key); err != nil {
		f.Close()
		return nil, err
	}
	return key, f.Close()
}

// Make makes a local KEK that does not exist yet (a rotation's new one);
// an existing KEK, or a KMS key, is left as it is.
func (k *KEK) Make() error {
	_, err := k.keeper(true)
	return err
}

// NewDataKey returns a fresh 32-byte key and its form wrapped by k.
func (k *KEK) NewDataKey(ctx context.Context) (key, wrapped []byte, err error) {
	key = make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, nil, err
	}
	if wrapped, err = k.Wrap(ctx, key); err != nil {
		return nil, nil, err
	}
	return key, wrapped, nil
}

// Wrap encrypts key under k (a local KEK is made on first use): a
// rotation's rewrap.
func (k *KEK) Wrap(ctx context.Context, key []byte) ([]byte, error) {
	kp, err := k.keeper(true)
	if err != nil {
		return nil, err
	}
	wrapped, err := kp.Encrypt(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("wrap key: %w", err)
	}
	return wrapped, nil
}

// Unwrap returns the data key wrapped is. A key that does not open is
// ErrUnwrap; a KMS that cannot be reached is its own error.
func (k *KEK) Unwrap(ctx context.Context, wrapped []byte) ([]byte, error) {
	kp, err := k.keeper(false)
	if err != nil {
		return nil, err
	}
	key, err := kp.Decrypt(ctx, wrapped)
	if err != nil {
		if k.kms == nil || k.inProcess || isRefusal(err) {
			return nil, fmt.Errorf("%w: %w", ErrUnwrap, err)
		}
		return nil, fmt.Errorf("unwrap data key: %w", err)
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("%w: %d bytes", ErrUnwrap, len(key))
	}
	return key, nil
}

// Close releases the keeper.
func (k *KEK) Close() error {
	var errs []error
	if k.kms != nil {
		errs = append(errs, k.kms.Close())
	}
	k.mu.Lock()
	if k.local != nil {
		errs = append(errs, k.local.Close())
	}
	k.mu.Unlock()
	return errors.Join(errs...)
}

// isRefusal reports a KMS that answered and refused the ciphertext, as
// against one that could not be reached.
func isRefusal(err error) bool {
	switch gcerrors.Code(err) {
	case gcerrors.InvalidArgument, gcerrors.FailedPrecondition, gcerrors.PermissionDenied, gcerrors.NotFound:
		return true
	}
	return false
}

// sealedVersion starts every sealed data key: the format below, so a
// later one can be told apart.
const sealedVersion = 1

// sealedLen is a sealed data key's length: version, GCM's 12-byte nonce,
// the 32-byte key and GCM's 16-byte tag.
const sealedLen = 1 + 12 + 32 + 16

// SealDataKey seals a backup's data key under its owner's key: AES-256-GCM
// with a random nonce, the owner and the backup id as associated data, so
// a sealed key moved to another row (another backup, another owner) does
// not open. The result is version (1 byte) || nonce (12) || ciphertext
// and tag (48).
func SealDataKey(ownerKey, dataKey []byte, owner, backupID string) ([]byte, error) {
	if len(dataKey) != 32 {
		return nil, fmt.Errorf("a data key is 32 bytes, not %d", len(dataKey))
	}
	aead, err := ownerAEAD(ownerKey)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 1+aead.NonceSize(), sealedLen)
	out[0] = sealedVersion
	if _, err := rand.Read(out[1:]); err != nil {
		return nil, err
	}
	return aead.Seal(out, out[1:], dataKey, sealedAD(owner, backupID)), nil
}

// OpenDataKey opens what SealDataKey sealed for (owner, backupID). Any
// other owner key, row or damage is ErrUnwrap.
func OpenDataKey(ownerKey, sealed []byte, owner, backupID string) ([]byte, error) {
	aead, err := ownerAEAD(ownerKey)
	if err != nil {
		return nil, err
	}
	if len(sealed) != sealedLen || sealed[0] != sealedVersion {
		return nil, fmt.Errorf("%w: a sealed data key is %d bytes of version %d", ErrUnwrap, sealedLen, sealedVersion)
	}
	n := 1 + aead.NonceSize()
	key, err := aead.Open(nil, sealed[1:n], sealed[n:], sealedAD(owner, backupID))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnwrap, err)
	}
	return key, nil
}

func ownerAEAD(ownerKey []byte) (cipher.AEAD, error) {
	if len(ownerKey) != 32 {
		return nil, fmt.Errorf("%w: an owner key is 32 bytes, not %d", ErrUnwrap, len(ownerKey))
	}
	block, err := aes.NewCipher(ownerKey)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// sealedAD binds a sealed key to its row; the lengths keep ("ab","c")
// and ("a","bc") apart.
func sealedAD(owner, backupID string) []byte {
	return fmt.Appendf(nil, "contentbackup data key v1\x00%d:%s%d:%s", len(owner), owner, len(backupID), backupID)
}
