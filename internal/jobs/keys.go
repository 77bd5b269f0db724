package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/contentbackup/contentbackup/internal/keyring"
	"github.com/contentbackup/contentbackup/internal/store"
)

// The key hierarchy: the KEK (Config.KEK, a KMS key or a local file)
// wraps each owner's key (owner_keys), which seals each of the owner's
// backup data keys (keyring.SealDataKey). Owner keys are read from the
// store on every use and never cached: an erasure on one replica is then
// an erasure on every replica at once.

// ErrOwnerKeyErased: the backup's data key was sealed by an owner key
// that no longer exists (the owner was erased; the name may since belong
// to a new owner). Nothing opens it again.
var ErrOwnerKeyErased = fmt.Errorf("the owner key that sealed this backup's data key was destroyed: %w", ErrKeyUnavailable)

// kekFor is the KEK whose fingerprint is fp: the current one, or one
// being retired (Config.RetiringKEKs). Any other is ErrKeyUnavailable.
func (ks *Keys) kekFor(fp string) (*keyring.KEK, error) {
	current, err := ks.cfg.KEK.Fingerprint()
	if err == nil && (fp == current || fp == "") {
		return ks.cfg.KEK, nil
	}
	for _, k := range ks.cfg.RetiringKEKs {
		if f, ferr := k.Fingerprint(); ferr == nil && f == fp {
			return k, nil
		}
	}
	if g, gerr := ks.cfg.KEK.Generation(fp); gerr == nil {
		return g, nil // a local KEK the server rotated away from (retire.go)
	}
	if err != nil {
		return nil, fmt.Errorf("key-encryption key %s: %w: %w", fp, ErrKeyUnavailable, err)
	}
	return nil, fmt.Errorf("key-encryption key %s is not this server's: %w", fp, ErrKeyUnavailable)
}

// ownerKey returns owner's key and its id, making one (wrapped by the
// current KEK) when the owner has none and create is set.
func (ks *Keys) ownerKey(ctx context.Context, owner string, create bool) ([]byte, string, error) {
	row, err := ks.cfg.Store.GetOwnerKey(ctx, owner)
	if errors.Is(err, store.ErrNotFound) && create {
		row, err = ks.createOwnerKey(ctx, owner)
	}
	if errors.Is(err, store.ErrNotFound) {
		return nil, "", ErrOwnerKeyErased
	}
	if err != nil {
		return nil, "", err
	}
	kek, err := ks.kekFor(row.KEKFingerprint)
	if err != nil {
		// The row may have been rewrapped, and its old KEK destroyed,
		// since it was read: read it once more.
		if again, rerr := ks.cfg.Store.GetOwnerKey(ctx, owner); rerr == nil && again.KEKFingerprint != row.KEKFingerprint {
			row = again
			kek, err = ks.kekFor(row.KEKFingerprint)
		}
	}
	if err != nil {
		return nil, "", fmt.Errorf("owner key: %w", err)
	}
	key, err := kek.Unwrap(ctx, row.Wrapped)
	if err != nil {
		return nil, "", fmt.Errorf("owner key: %w", err)
	}
	return key, row.KeyID, nil
}

func (ks *Keys) createOwnerKey(ctx context.Context, owner string) (store.OwnerKey, error) {
	for attempt := 0; ; attempt++ {
		k, err := ks.createOwnerKeyOnce(ctx, owner)
		// Retired: the KEK was rotated between reading it and storing
		// the row (by another replica sharing the key directory); the
		// next read finds the new one.
		if !errors.Is(err, store.ErrKEKRetired) || attempt == 2 {
			return k, err
		}
	}
}

func (ks *Keys) createOwnerKeyOnce(ctx context.Context, owner string) (store.OwnerKey, error) {
	_, wrapped, err := ks.cfg.KEK.NewDataKey(ctx)
	if err != nil {
		return store.OwnerKey{}, fmt.Errorf("owner key: %w", err)
	}
	fp, err := ks.cfg.KEK.Fingerprint()
	if err != nil {
		return store.OwnerKey{}, fmt.Errorf("owner key: %w", err)
	}
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return store.OwnerKey{}, err
	}
	// The key itself is read back through the stored row: when another
	// replica stored one first, its key is the owner's.
	return ks.cfg.Store.CreateOwnerKey(ctx, store.OwnerKey{Owner: owner, KeyID: hex.EncodeToString(id[:]), Wrapped: wrapped,
		KEKFingerprint: fp, Created: time.Now()})
}

// newDataKey returns a fresh data key for owner's backup id, sealed by
// the owner's key, and that key's id.
func (ks *Keys) newDataKey(ctx context.Context, owner, id string) (key, sealed []byte, ownerKeyID string, err error) {
	ownerKey, ownerKeyID, err := ks.ownerKey(ctx, owner, true)
	if err != nil {
		return nil, nil, "", err
	}
	key = make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, nil, "", err
	}
	if sealed, err = keyring.SealDataKey(ownerKey, key, owner, id); err != nil {
		return nil, nil, "", err
	}
	return key, sealed, ownerKeyID, nil
}

// unwrap opens b's data key. A key sealed by an owner key that is gone,
// or wrapped under a KEK this server does not hold, is ErrKeyUnavailable
// (the backup is intact, this server cannot open it); one that does not
// open under the key that sealed it is ErrBackupDamaged.
func (ks *Keys) unwrap(ctx context.Context, b store.Backup) ([]byte, error) {
	if b.OwnerKeyID == "" && len(b.WrappedKey) == 0 {
		return nil, fmt.Errorf("backup %s: %w", b.ID, ErrOwnerKeyErased)
	}
	if b.OwnerKeyID == "" {
		return ks.unwrapLegacy(ctx, b)
	}
	ownerKey, keyID, err := ks.ownerKey(ctx, b.Owner, false)
	if err == nil && keyID != b.OwnerKeyID {
		err = ErrOwnerKeyErased
	}
	if err != nil {
		ks.cfg.Log.Error("backup key unavailable", zap.String("owner", b.Owner), zap.String("backup", b.ID), zap.Error(err))
		if errors.Is(err, keyring.ErrUnwrap) {
			return nil, fmt.Errorf("backup %s: its owner's key does not open under its key-encryption key: %w", b.ID, ErrBackupDamaged)
		}
		return nil, fmt.Errorf("backup %s: %w", b.ID, err)
	}
	key, err := keyring.OpenDataKey(ownerKey, b.WrappedKey, b.Owner, b.ID)
	if err != nil {
		ks.cfg.Log.Error("backup key does not open", zap.String("owner", b.Owner), zap.String("backup", b.ID), zap.Error(err))
		return nil, fmt.Errorf("backup %s: its data key does not open under its owner's key: %w", b.ID, ErrBackupDamaged)
	}
	return key, nil
}

// unwrapLegacy opens the data key of a row written before owner keys,
// which a KEK wraps directly.
func (ks *Keys) unwrapLegacy(ctx context.Context, b store.Backup) ([]byte, error) {
	kek, err := ks.kekFor(b.KEKFingerprint)
	if err != nil {
		ks.cfg.Log.Error("backup key unavailable", zap.String("owner", b.Owner), zap.String("backup", b.ID),
			zap.String("wrapped_under", b.KEKFingerprint), zap.Error(err))
		return nil, fmt.Errorf("backup %s: its data key is wrapped under key-encryption key %s: %w", b.ID, b.KEKFingerprint, ErrKeyUnavailable)
	}
	key, err := kek.Unwrap(ctx, b.WrappedKey)
	if errors.Is(err, keyring.ErrUnwrap) {
		ks.cfg.Log.Error("backup key does not open", zap.String("owner", b.Owner), zap.String("backup", b.ID), zap.Error(err))
		return nil, fmt.Errorf("backup %s: its data key does not open under this server's key-encryption key: %w", b.ID, ErrBackupDamaged)
	}
	return key, err
}

// KeyPass is what one pass of the key worker did.
type KeyPass struct {
	// Rotated: owner keys rewrapped under the current KEK.
	Rotated int
	// Migrated: legacy backups whose data keys were resealed under their
	// owner's key.
	Migrated int
	// Failed: rows that could not be rewrapped (each logged); the next
	// pass tries them again.
	Failed int
	// Destroyed: retired KEKs this pass found nothing under and stopped
	// holding (retire.go).
	Destroyed int
}

// keyBatch is how many rows one read of the key worker takes.
const keyBatch = 500

// MaintainKeys runs one pass of the key worker over the whole catalog:
// every owner key wrapped under a KEK other than the current one is
// rewrapped under it (a rotation), and every backup whose data key a KEK
// wraps directly is resealed under its owner's key (the migration to
// owner keys). Only key columns change, never an object. Each rewrap is
// conditional on the row as read, so replicas running it at once, or a
// pass cut short by a crash and run again, change each row once; progress,
// when set, hears each batch.
func (ks *Keys) MaintainKeys(ctx context.Context, progress func(KeyPass)) (KeyPass, error) {
	var pass KeyPass
	if err := ks.retireForErasures(ctx); err != nil {
		return pass, err
	}
	current, err := ks.cfg.KEK.Fingerprint()
	if errors.Is(err, keyring.ErrNoKEK) {
		// A local KEK not made yet wraps nothing: nothing to rotate to.
		return pass, nil
	}
	if err != nil {
		return pass, err
	}
	after := ""
	for {
		rows, err := ks.cfg.Store.OwnerKeysNotUnder(ctx, current, after, keyBatch)
		if err != nil {
			return pass, err
		}
		for _, row := range rows {
			if err := ks.rewrapOwnerKey(ctx, row, current); err != nil {
				if ctx.Err() != nil {
					return pass, ctx.Err()
				}
				pass.Failed++
				ks.cfg.Log.Warn("owner key not rewrapped", zap.String("owner", row.Owner), zap.String("kek", row.KEKFingerprint), zap.Error(err))
				continue
			}
			pass.Rotated++
		}
		if progress != nil && len(rows) > 0 {
			progress(pass)
		}
		if len(rows) < keyBatch {
			break
		}
		after = rows[len(rows)-1].Owner
	}
	afterOwner, afterID := "", ""
	for {
		rows, err := ks.cfg.Store.LegacyBackups(ctx, afterOwner, afterID, keyBatch)
		if err != nil {
			return pass, err
		}
		for _, b := range rows {
			if err := ks.migrateBackupKey(ctx, b); err != nil {
				if ctx.Err() != nil {
					return pass, ctx.Err()
				}
				pass.Failed++
				ks.cfg.Log.Warn("backup key not resealed under its owner's key", zap.String("owner", b.Owner), zap.String("backup", b.ID), zap.Error(err))
				continue
			}
			pass.Migrated++
		}
		if progress != nil && len(rows) > 0 {
			progress(pass)
		}
		if len(rows) < keyBatch {
			break
		}
		afterOwner, afterID = rows[len(rows)-1].Owner, rows[len(rows)-1].ID
	}
	destroyed, err := ks.destroyRetired(ctx, current)
	pass.Destroyed = destroyed
	return pass, err
}

func (ks *Keys) rewrapOwnerKey(ctx context.Context, row store.OwnerKey, current string) error {
	from, err := ks.kekFor(row.KEKFingerprint)
	if err != nil {
		return err
	}
	key, err := from.Unwrap(ctx, row.Wrapped)
	if err != nil {
		return err
	}
	wrapped, err := ks.cfg.KEK.Wrap(ctx, key)
	if err != nil {
		return err
	}
	err = ks.cfg.Store.RewrapOwnerKey(ctx, row, wrapped, current, time.Now())
	if errors.Is(err, store.ErrNotFound) {
		return nil // rewrapped by another replica, or erased, meanwhile
	}
	return err
}

func (ks *Keys) migrateBackupKey(ctx context.Context, b store.Backup) error {
	key, err := ks.unwrapLegacy(ctx, b)
	if err != nil {
		return err
	}
	ownerKey, keyID, err := ks.ownerKey(ctx, b.Owner, true)
	if err != nil {
		return err
	}
	sealed, err := keyring.SealDataKey(ownerKey, key, b.Owner, b.ID)
	if err != nil {
		return err
	}
	err = ks.cfg.Store.RewrapBackupKey(ctx, b.Owner, b.ID, b.WrappedKey, sealed, keyID)
	if errors.Is(err, store.ErrNotFound) {
		return nil // resealed by another replica, or erased, meanwhile
	}
	return err
}

// RunKeyWorker runs MaintainKeys now and then every period until ctx
// ends, logging what each pass did and telling status (when set) the
// key status after it.
func (ks *Keys) RunKeyWorker(ctx context.Context, period time.Duration, status func(KeyStatus)) {
	for {
		start := time.Now()
		pass, err := ks.MaintainKeys(ctx, func(p KeyPass) {
			ks.cfg.Log.Info("key worker progress", zap.Int("owner_keys_rewrapped", p.Rotated), zap.Int("backup_keys_resealed", p.Migrated), zap.Int("failed", p.Failed))
		})
		switch {
		case err != nil && ctx.Err() == nil:
			ks.cfg.Log.Warn("key worker", zap.Error(err))
		case pass != KeyPass{}:
			ks.cfg.Log.Info("key worker pass", zap.Int("owner_keys_rewrapped", pass.Rotated), zap.Int("backup_keys_resealed", pass.Migrated),
				zap.Int("failed", pass.Failed), zap.Int("keks_destroyed", pass.Destroyed), zap.Duration("took", time.Since(start)))
		}
		if status != nil {
			if st, err := ks.keyStatus(ctx, false); err == nil {
				status(st)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(period):
		case <-ks.keyWake:
		}
	}
}

// KeyStatus is which KEKs wrap the catalog's keys.
type KeyStatus struct {
	// Current is the current KEK's fingerprint ("" when a local KEK has
	// not been made yet).
	Current string
	// KEKs lists every KEK that wraps a row or that the server holds,
	// current first.
	KEKs []KEKUse
	// Retirements are the KEKs erasures need gone, and where each stands
	// (retire.go).
	Retirements []Retirement
}

// Retirement is one KEK on its way out, and what happens next.
type Retirement struct {
	store.KEKRetirement
	// NextStep says, for people, the key worker's next step or the
	// operator's ("" once it is gone).
	NextStep string
}

// KEKUse is one KEK and what it wraps.
type KEKUse struct {
	Fingerprint string
	// State: "current", "retiring" (held by this server to rotate away
	// from) or "unavailable" (rows under it that this server cannot
	// open).
	State string
	// OwnerKeys it wraps, and legacy backups whose data keys it wraps
	// directly.
	OwnerKeys, LegacyBackups int64
	// OwnerKeysUncounted: the current KEK's owner keys were not counted
	// (the key worker's periodic status, which reads only the rows still
	// to rewrap; OwnerKeys is then 0).
	OwnerKeysUncounted bool
}

// Retired reports rows that a rotation has not moved off a KEK other
// than the current one: what verification reports before the old KEK is
// removed.
func (s KeyStatus) Retired() int64 {
	var n int64
	for _, u := range s.KEKs {
		if u.State != "current" {
			n += u.OwnerKeys + u.LegacyBackups
		}
	}
	return n
}

// KeyStatus counts the rows under each KEK: every owner's key, on
// demand (GetKeyStatus).
func (ks *Keys) KeyStatus(ctx context.Context) (KeyStatus, error) {
	return ks.keyStatus(ctx, true)
}

// keyStatus is KeyStatus; unless whole, the current KEK's owner keys are
// not counted, so the key worker's pass reads the rows still to rewrap
// and not every owner's key (issue 52).
func (ks *Keys) keyStatus(ctx context.Context, whole bool) (KeyStatus, error) {
	current, _ := ks.cfg.KEK.Fingerprint()
	except := current
	if whole {
		except = ""
	}
	counts, err := ks.cfg.Store.KeyCounts(ctx, except)
	if err != nil {
		return KeyStatus{}, err
	}
	st := KeyStatus{Current: current}
	uses := map[string]*KEKUse{}
	use := func(fp string) *KEKUse {
		if fp == "" {
			fp = current // legacy rows older than fingerprints: CheckKEK held them to the current KEK
		}
		if u, ok := uses[fp]; ok {
			return u
		}
		u := &KEKUse{Fingerprint: fp, State: "unavailable"}
		if _, err := ks.kekFor(fp); err == nil {
			u.State = "retiring"
			if fp == current {
				u.State = "current"
			}
		}
		uses[fp] = u
		return u
	}
	if current != "" {
		use(current)
	}
	for _, k := range ks.cfg.RetiringKEKs {
		if fp, err := k.Fingerprint(); err == nil {
			use(fp)
		}
	}
	if gens, err := ks.cfg.KEK.Generations(); err == nil {
		for _, fp := range gens {
			use(fp)
		}
	}
	retirements, err := ks.cfg.Store.ListKEKRetirements(ctx)
	if err != nil {
		return KeyStatus{}, err
	}
	for _, r := range retirements {
		st.Retirements = append(st.Retirements, Retirement{KEKRetirement: r, NextStep: ks.nextStep(r, current, counts)})
	}
	for fp, n := range counts.OwnerKeys {
		use(fp).OwnerKeys += n
	}
	if except != "" {
		use(except).OwnerKeysUncounted = true
	}
	for fp, n := range counts.LegacyBackups {
		use(fp).LegacyBackups += n
	}
	for _, u := range uses {
		st.KEKs = append(st.KEKs, *u)
	}
	rank := map[string]int{"current": 0, "retiring": 1, "unavailable": 2}
	slices.SortFunc(st.KEKs, func(a, b KEKUse) int {
		if d := rank[a.State] - rank[b.State]; d != 0 {
			return d
		}
		return strings.Compare(a.Fingerprint, b.Fingerprint)
	})
	return st, nil
}
