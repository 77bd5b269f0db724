package jobs

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/contentbackup/contentbackup/internal/store"
)

// Keys is the key hierarchy's keeper on this server: the KEK and the
// ones being retired, the owner keys they wrap (keys.go), the key worker
// that rewraps them and retires KEKs for erasures (retire.go), and the
// check at start that the server holds the KEKs the catalog needs.
type Keys struct {
	cfg *Config
	// keyWake asks the key worker for a pass now: an erasure has just
	// noted a KEK to retire.
	keyWake chan struct{}
	// rotateErr is why the last rotation of the local KEK for erasures
	// failed ("" when it did not): the key status says it.
	rotateErr atomic.Value
}

func newKeys(cfg *Config) *Keys {
	return &Keys{cfg: cfg, keyWake: make(chan struct{}, 1)}
}

// CheckKEK compares the server's key-encryption keys with the catalog's,
// before the server runs any job: every KEK an owner key or a legacy
// backup row is wrapped under must be the current KEK or one of the
// retiring ones. A KEK that cannot be read, or a row under one the server
// does not hold, is ErrKEKMismatch naming the file and the fingerprints
// the catalog expects, rather than a server that reads every old backup
// as damaged and wraps new keys under a second KEK. A catalog that holds
// no wrapped key takes any KEK (a local one is made on first use).
func (ks *Keys) CheckKEK(ctx context.Context) error {
	uses, err := ks.cfg.Store.WrappingKEKs(ctx)
	if err != nil {
		return fmt.Errorf("check the key-encryption key: %w", err)
	}
	// The fingerprints owner keys are under, from the index: the check
	// at start reads a few entries a KEK, not every owner's key (issue
	// 52: counting them all made start-up grow with the fleet).
	keks, err := ks.cfg.Store.OwnerKeyKEKs(ctx)
	if err != nil {
		return fmt.Errorf("check the key-encryption key: %w", err)
	}
	for _, fp := range keks {
		if !slices.ContainsFunc(uses, func(u store.WrappingKEK) bool { return u.Fingerprint == fp }) {
			uses = append(uses, store.WrappingKEK{Fingerprint: fp})
		}
	}
	if len(uses) == 0 {
		return nil
	}
	where := "the key keeper (--job-key-keeper)"
	if p := ks.cfg.KEK.Path(); p != "" {
		where = p
	}
	var expected []string
	for _, u := range uses {
		if u.Fingerprint != "" {
			expected = append(expected, u.Fingerprint)
		}
	}
	slices.Sort(expected)
	want := strings.Join(expected, ", ")
	if want == "" {
		want = "(rows written before fingerprints)"
	}
	if len(ks.cfg.RetiringKEKs) > 0 {
		// A rotation asked for: its new local KEK is made now, so the
		// check below compares the catalog with it.
		if err := ks.cfg.KEK.Make(); err != nil {
			return fmt.Errorf("%w: the new key-encryption key %s: %w", ErrKEKMismatch, where, err)
		}
	}
	current, err := ks.cfg.KEK.Fingerprint()
	if err != nil {
		return fmt.Errorf("%w: %s cannot be read (%w), and the catalog holds keys it wrapped: fingerprint %s; restore that file or keeper",
			ErrKEKMismatch, where, err, want)
	}
	for _, u := range uses {
		if u.Fingerprint == "" {
			if _, err := ks.cfg.KEK.Unwrap(ctx, u.Sample); err != nil {
				return fmt.Errorf("%w: backups written before fingerprints do not open under %s (fingerprint %s): %w", ErrKEKMismatch, where, current, err)
			}
			continue
		}
		if _, err := ks.kekFor(u.Fingerprint); err != nil {
			return fmt.Errorf("%w: %s has fingerprint %s; the catalog holds keys wrapped under %s: restore that key, or point the server at it (--job-key-retiring while rotating away from it)",
				ErrKEKMismatch, where, current, want)
		}
	}
	return nil
}
