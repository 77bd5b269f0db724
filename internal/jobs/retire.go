package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/contentbackup/contentbackup/internal/keyring"
	"github.com/contentbackup/contentbackup/internal/store"
)

// An erasure deletes the owner's key row, but the row outlives the delete
// in the database files: PostgreSQL's dead tuples and WAL keep it until
// their space is reused, and so do copies of the files. The row is
// wrapped by a KEK the server holds, so the erasure is complete only once
// no KEK that wrapped the owner's key is held by the server (issue 46,
// finding 1). The key worker gets there by itself:
//
//  1. An erasure notes the KEKs that wrapped what it destroys
//     (store.NoteErasure), before destroying it.
//  2. A noted KEK that is still current is rotated away from: a local
//     KEK by the server (keyring.KEK.Rotate: a new kek.key, the old kept
//     as a generation); a KMS key by the operator (the key status says
//     so). Either way it is then retired in the store: no row is wrapped
//     under it again (CreateOwnerKey and RewrapOwnerKey refuse it).
//  3. The rewrap pass moves every row off it (MaintainKeys).
//  4. Once nothing is under it, a local generation is overwritten and
//     removed; a KMS key is recorded gone once the server no longer
//     holds it (dropped from --job-key-retiring). The erasures that
//     waited on it are then complete: readable by nothing the server
//     holds from that time (ErasureCompletion).
//
// One rotation covers every erasure noted before it, so erasures in a
// burst cost one rotation.

// retireForErasures is step 2.
func (ks *Keys) retireForErasures(ctx context.Context) error {
	due, err := ks.cfg.Store.ListKEKRetirements(ctx)
	if err != nil {
		return err
	}
	for _, r := range due {
		if !r.Retired.IsZero() {
			continue
		}
		current, err := ks.cfg.KEK.Fingerprint()
		if err != nil && !errors.Is(err, keyring.ErrNoKEK) {
			return err
		}
		if r.Fingerprint == current {
			if !ks.cfg.KEK.Rotatable() {
				continue // a KMS key: the operator rotates it (docs/erasure.md)
			}
			rotated, err := ks.cfg.KEK.Rotate(current)
			if err != nil {
				// A key directory the server cannot write (a read-only
				// mount, a bind-mounted file): the rest of the pass still
				// runs, and the key status tells the operator what to do.
				ks.rotateErr.Store(err.Error())
				ks.cfg.Log.Warn("the key-encryption key could not be rotated for erasures: make --job-keys writable, or rotate it by hand (docs/erasure.md)",
					zap.String("kek", current), zap.Strings("erasures", r.Jobs), zap.Error(err))
				continue
			}
			ks.rotateErr.Store("")
			if rotated {
				now, _ := ks.cfg.KEK.Fingerprint()
				ks.cfg.Log.Info("audit: key-encryption key rotated for erasures", zap.String("audit", "kek.rotate"),
					zap.String("from", current), zap.String("to", now), zap.Strings("erasures", r.Jobs))
			}
		}
		if err := ks.cfg.Store.RetireKEK(ctx, r.Fingerprint, time.Now()); err != nil {
			return err
		}
	}
	return nil
}

// destroyRetired is step 4: every retired KEK nothing is under any more
// is destroyed, or recorded gone, and counted.
func (ks *Keys) destroyRetired(ctx context.Context, current string) (int, error) {
	retired, err := ks.cfg.Store.ListKEKRetirements(ctx)
	if err != nil {
		return 0, err
	}
	var counts store.KeyCounts
	n := 0
	for _, r := range retired {
		if r.Retired.IsZero() || !r.Destroyed.IsZero() || r.Fingerprint == current {
			continue
		}
		if counts.OwnerKeys == nil {
			if counts, err = ks.cfg.Store.KeyCounts(ctx, current); err != nil {
				return n, err
			}
		}
		if counts.OwnerKeys[r.Fingerprint]+counts.LegacyBackups[r.Fingerprint] > 0 {
			continue // rows left to rewrap
		}
		if err := ks.cfg.KEK.DestroyGeneration(r.Fingerprint); err != nil {
			return n, err
		}
		if ks.holdsRetiring(r.Fingerprint) {
			// A KMS key or a file the operator passed as retiring: the
			// server holds it until it is dropped from the flag.
			continue
		}
		if err := ks.cfg.Store.KEKDestroyed(ctx, r.Fingerprint, time.Now()); err != nil {
			return n, err
		}
		n++
		ks.cfg.Log.Info("audit: key-encryption key destroyed; the erasures that waited on it are complete", zap.String("audit", "kek.destroy"),
			zap.String("kek", r.Fingerprint), zap.Strings("erasures", r.Jobs))
	}
	return n, nil
}

func (ks *Keys) holdsRetiring(fp string) bool {
	for _, k := range ks.cfg.RetiringKEKs {
		if f, err := k.Fingerprint(); err == nil && f == fp {
			return true
		}
	}
	return false
}

// noteErasureKEKs is step 1 for owner's erasure job: the KEKs that wrap
// its owner key and any backup key of its written before owner keys.
func (ks *Keys) noteErasureKEKs(ctx context.Context, owner, job string) error {
	fps := map[string]bool{}
	k, err := ks.cfg.Store.GetOwnerKey(ctx, owner)
	switch {
	case err == nil:
		fps[k.KEKFingerprint] = true
	case !errors.Is(err, store.ErrNotFound):
		return err
	}
	current, _ := ks.cfg.KEK.Fingerprint()
	before := ""
	for {
		page, err := ks.cfg.Store.ListBackups(ctx, store.BackupQuery{Owner: owner, Before: before, Limit: 500})
		if err != nil {
			return err
		}
		for _, b := range page {
			if b.OwnerKeyID == "" && len(b.WrappedKey) > 0 {
				fp := b.KEKFingerprint
				if fp == "" {
					fp = current
				}
				fps[fp] = true
			}
		}
		if len(page) < 500 {
			break
		}
		before = page[len(page)-1].ID
	}
	now := time.Now()
	for fp := range fps {
		if fp == "" {
			continue
		}
		if err := ks.cfg.Store.NoteErasure(ctx, fp, job, now); err != nil {
			return err
		}
	}
	return nil
}

// wakeKeyWorker asks for a key worker pass now (RunKeyWorker).
func (ks *Keys) wakeKeyWorker() {
	select {
	case ks.keyWake <- struct{}{}:
	default:
	}
}

// ErasureCompletion is where erasure job stands against the KEKs that
// wrapped what it destroyed: complete, and from when no KEK the server
// holds opens anything of the owner (the latest destruction among them),
// or waiting on the KEKs listed. An erasure that destroyed no key (the
// owner never had one) is complete when it ends: ok with a zero time.
func (ks *Keys) ErasureCompletion(ctx context.Context, job string) (complete bool, since time.Time, waiting []string, err error) {
	keks, err := ks.cfg.Store.ErasureKEKs(ctx, job)
	if err != nil {
		return false, time.Time{}, nil, err
	}
	for _, k := range keks {
		if k.Destroyed.IsZero() {
			waiting = append(waiting, k.Fingerprint)
		} else if k.Destroyed.After(since) {
			since = k.Destroyed
		}
	}
	if len(waiting) > 0 {
		return false, time.Time{}, waiting, nil
	}
	return true, since, nil, nil
}

// nextStep says what retirement r waits on.
func (ks *Keys) nextStep(r store.KEKRetirement, current string, counts store.KeyCounts) string {
	switch {
	case !r.Destroyed.IsZero():
		return ""
	case r.Retired.IsZero() && r.Fingerprint == current && !ks.cfg.KEK.Rotatable():
		return "the operator rotates it: point --job-key-keeper at a new KMS key and pass this one to --job-key-retiring"
	case r.Retired.IsZero() && r.Fingerprint == current:
		if e, _ := ks.rotateErr.Load().(string); e != "" {
			return "the key worker could not rotate it (" + e + "): make --job-keys writable, or rotate it by hand with --job-key-retiring (docs/erasure.md)"
		}
		return "the key worker rotates it at its next pass"
	case r.Retired.IsZero():
		return "the key worker retires it at its next pass"
	}
	if n := counts.OwnerKeys[r.Fingerprint] + counts.LegacyBackups[r.Fingerprint]; n > 0 {
		return fmt.Sprintf("the key worker rewraps the %d rows still under it", n)
	}
	if ks.holdsRetiring(r.Fingerprint) {
		return "nothing is under it: drop it from --job-key-retiring, restart, then disable or delete it in the KMS"
	}
	return "the key worker destroys it at its next pass"
}
