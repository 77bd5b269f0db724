package keyring

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/contentbackup/contentbackup/internal/archive"
)

// A local KEK can be rotated by the server itself: an erasure is complete
// only once no KEK that wrapped the erased owner's key is held anywhere,
// because the deleted key row outlives the delete in the database files
// (issue 46, finding 1). Rotate makes a new kek.key and keeps the old one
// as a generation, kek-<fingerprint>.key, beside it; the key worker
// rewraps every row off the generation, then DestroyGeneration overwrites
// and removes it. Replicas that share the directory follow: each use of
// the local KEK notices the file replaced, and a generation is read from
// its file on every use, never kept in memory.

const (
	generationPrefix = "kek-"
	generationSuffix = ".key"
	rotateLock       = ".rotate.lock"
)

// Rotatable reports whether the server can rotate this KEK itself: a
// local key file it makes (not a KMS key, nor a retiring file it was
// given).
func (k *KEK) Rotatable() bool { return k.kms == nil && !k.existing && k.file == KEKFile }

// Rotate replaces the local KEK whose fingerprint is from with a new
// one, keeping the old as a generation. It reports false, changing
// nothing, when the current KEK is no longer from (another replica
// rotated first). Rotations of one directory take turns (a file lock),
// so two replicas asked at once make one new key.
func (k *KEK) Rotate(from string) (bool, error) {
	if !k.Rotatable() {
		return false, errors.New("the key-encryption key is not a local file this server makes: rotate it by hand (docs/erasure.md)")
	}
	unlock, err := lockDir(k.dir)
	if err != nil {
		return false, err
	}
	defer unlock()
	path := filepath.Join(k.dir, k.file)
	b, err := os.ReadFile(path)
	if err != nil {
		return false, fmt.Errorf("rotate the key-encryption key: %w", err)
	}
	key, err := archive.ParseKey(b)
	if err != nil {
		return false, fmt.Errorf("rotate the key-encryption key %s: %w: %w", path, ErrBadKEK, err)
	}
	if fingerprintOf("local", key) != from {
		return false, nil
	}
	if err := writeFileSynced(k.generationPath(from), key, true); err != nil && !errors.Is(err, os.ErrExist) {
		return false, fmt.Errorf("keep the key-encryption key's generation: %w", err)
	}
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return false, err
	}
	tmp := path + ".new"
	_ = os.Remove(tmp)
	if err := writeFileSynced(tmp, fresh, true); err != nil {
		return false, fmt.Errorf("write the new key-encryption key: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return false, fmt.Errorf("install the new key-encryption key: %w", err)
	}
	if err := syncDir(k.dir); err != nil {
		return false, err
	}
	_, err = k.keeper(false)
	return true, err
}

// Generation returns the local KEK generation whose fingerprint is fp,
// read from its file now; ErrNoKEK when there is none (never one, or
// destroyed).
func (k *KEK) Generation(fp string) (*KEK, error) {
	if k.kms != nil || !validFingerprint(fp) {
		return nil, ErrNoKEK
	}
	g := &KEK{dir: k.dir, file: generationPrefix + fp + generationSuffix, existing: true}
	if _, err := g.keeper(false); err != nil {
		return nil, err
	}
	if got, _ := g.Fingerprint(); got != fp {
		return nil, fmt.Errorf("%s: holds key-encryption key %s: %w", g.Path(), got, ErrBadKEK)
	}
	return g, nil
}

// Generations lists the fingerprints of the local KEK's generations on
// disk.
func (k *KEK) Generations() ([]string, error) {
	if k.kms != nil {
		return nil, nil
	}
	entries, err := os.ReadDir(k.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		fp, ok := strings.CutPrefix(e.Name(), generationPrefix)
		if fp, ok2 := strings.CutSuffix(fp, generationSuffix); ok && ok2 && validFingerprint(fp) {
			out = append(out, fp)
		}
	}
	slices.Sort(out)
	return out, nil
}

// DestroyGeneration overwrites the generation fp's file with zeros,
// syncs it and removes it. A generation already gone is no error.
func (k *KEK) DestroyGeneration(fp string) error {
	if k.kms != nil || !validFingerprint(fp) {
		return nil
	}
	path := k.generationPath(fp)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("destroy key-encryption key %s: %w", fp, err)
	}
	st, err := f.Stat()
	if err == nil {
		_, err = f.WriteAt(make([]byte, st.Size()), 0)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Remove(path)
	}
	if err == nil {
		err = syncDir(k.dir)
	}
	if err != nil {
		return fmt.Errorf("destroy key-encryption key %s: %w", fp, err)
	}
	return nil
}

func (k *KEK) generationPath(fp string) string {
	return filepath.Join(k.dir, generationPrefix+fp+generationSuffix)
}

// validFingerprint: 16 lowercase hex digits, so a fingerprint read from
// the catalog never names a file outside the key directory.
func validFingerprint(fp string) bool {
	if len(fp) != 16 {
		return false
	}
	for _, c := range fp {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func writeFileSynced(path string, b []byte, exclusive bool) error {
	flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if exclusive {
		flags = os.O_WRONLY | os.O_CREATE | os.O_EXCL
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// lockDir takes the directory's rotation lock (flock: held until unlock,
// or until the process dies).
func lockDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, rotateLock), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("take the key directory's rotation lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("take the key directory's rotation lock: %w", err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
