package jobs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
	"unicode"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/contentbackup/contentbackup/internal/fault"
	"github.com/contentbackup/contentbackup/internal/records"
	"github.com/contentbackup/contentbackup/internal/store"
)

// Legal holds keep an owner's backups past retention, DeleteBackup and
// erasure while a case lasts. The store refuses the delete of a held
// backup in the deleting transaction itself (MarkBackupDeleting), so a
// hold set while a retention runs still stops it; erasure refuses an
// owner with any hold in force. Verification runs on held backups as on
// any.

// ErrHeld: a legal hold keeps the backup or the owner.
var ErrHeld = store.ErrHeld

// maxHoldReason bounds a hold's reason: a case reference, not a document.
const maxHoldReason = 512

// MaxHoldEnd is the latest end time a hold can have: the store keeps
// times as int64 nanoseconds since the epoch.
var MaxHoldEnd = time.Unix(0, math.MaxInt64).UTC()

// MaxHoldsPerOwner bounds the holds that may stand on one owner and its
// backups together, so reading them all stays cheap.
const MaxHoldsPerOwner = 1000

// ErrTooManyHolds: the owner has MaxHoldsPerOwner holds.
var ErrTooManyHolds = fault.New(fault.Exhausted, fmt.Sprintf("the owner has %d legal holds, the most it may: release some first", MaxHoldsPerOwner))

// ErrHoldAmbiguous: several holds stand on the target a release names;
// it must name the hold it ends.
var ErrHoldAmbiguous = fault.New(fault.FailedPrecondition, "several legal holds stand on this target: name the hold to release (hold_id)")

// SetHold places a new hold on owner, or on one of its backups when
// h.Backup is set, for principal; with h.ID set it changes that hold's
// reason and end instead (its target stays). Each hold is its own
// record: several may stand on one target, and setting one never
// changes another. Audited (hold.set, hold.change).
func (cat *Catalog) SetHold(ctx context.Context, principal string, h store.Hold) (store.Hold, error) {
	now := time.Now()
	if err := checkHold(h, now); err != nil {
		return store.Hold{}, invalid(err)
	}
	if h.Backup != "" {
		if _, err := cat.Backup(ctx, h.Owner, h.Backup); err != nil {
			return store.Hold{}, err
		}
	}
	if err := cat.erasureFence(ctx, h.Owner); err != nil {
		return store.Hold{}, err
	}
	holds, err := cat.cfg.Store.ListHolds(ctx, h.Owner)
	if err != nil {
		return store.Hold{}, err
	}
	var previous *store.Hold
	if h.ID != "" {
		for i := range holds {
			if holds[i].ID == h.ID {
				previous = &holds[i]
			}
		}
		if previous == nil || previous.Backup != h.Backup {
			return store.Hold{}, fmt.Errorf("hold %s on this target: %w", h.ID, ErrHoldNotFound)
		}
		h.Created = previous.Created
	} else {
		if len(holds) >= MaxHoldsPerOwner {
			return store.Hold{}, ErrTooManyHolds
		}
		h.ID, h.Created = NewID(now)[:32], now
	}
	h.Principal = principal
	if err := cat.cfg.Store.SetHold(ctx, h); err != nil {
		return store.Hold{}, err
	}
	// Checked again once stored: an erasure reads the owner's holds after
	// its job is stored, so a hold stored before that job is seen by it
	// (and the erasure refused), and one stored after is seen here and
	// taken back. Never both missed: a hold answered in force is never
	// erased (issue 46, finding 4).
	if err := cat.erasureFence(ctx, h.Owner); err != nil {
		undo := func(uctx context.Context) error { return cat.cfg.Store.ReleaseHold(uctx, h.Owner, h.ID) }
		if previous != nil {
			undo = func(uctx context.Context) error { return cat.cfg.Store.SetHold(uctx, *previous) }
		}
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if uerr := undo(uctx); uerr != nil && !errors.Is(uerr, store.ErrNotFound) {
			cat.cfg.Log.Error("a hold refused by an erasure could not be taken back", zap.String("owner", h.Owner), zap.String("hold", h.ID), zap.Error(uerr))
		}
		return store.Hold{}, err
	}
	audit, msg := "hold.set", "audit: legal hold set"
	fields := []zap.Field{zap.String("principal", principal), zap.String("owner", h.Owner), zap.String("backup", h.Backup),
		zap.String("hold", h.ID), zap.Time("until", h.Until)}
	if previous != nil {
		audit, msg = "hold.change", "audit: legal hold changed"
		fields = append(fields, zap.String("was_held_by", previous.Principal), zap.Time("was_until", previous.Until))
	}
	cat.cfg.Log.Info(msg, append(fields, zap.String("audit", audit))...)
	return h, nil
}

// checkHold checks the hold a caller asks for, at now.
func checkHold(h store.Hold, now time.Time) error {
	if err := records.CheckOwner(h.Owner); err != nil {
		return err
	}
	if err := checkReason(h.Reason, maxHoldReason, "the case or request the hold is for"); err != nil {
		return err
	}
	if !h.Until.IsZero() && !h.Until.After(now) {
		return errors.New("end_time: in the past; omit it for a hold that lasts until released")
	}
	if h.Until.After(MaxHoldEnd) {
		// Stored as nanoseconds since the epoch: a later time would wrap
		// to the past and the "held" backup be deleted.
		return fmt.Errorf("end_time: after %s, the latest the store holds; omit it for a hold that lasts until released", MaxHoldEnd.Format(time.RFC3339))
	}
	if h.ID != "" {
		return checkHoldID(h.ID)
	}
	return nil
}

// checkHoldID checks the form of a hold id a caller names.
func checkHoldID(id string) error {
	if !backupID.MatchString(id) {
		return fmt.Errorf("hold_id %.40q: a hold id is 32 lowercase hex digits", id)
	}
	return nil
}

// erasureFence refuses an owner an erasure is running for.
func (cat *Catalog) erasureFence(ctx context.Context, owner string) error {
	id, err := cat.cfg.Store.RunningErasure(ctx, owner)
	if err != nil {
		return err
	}
	if id != "" {
		return fmt.Errorf("erasure %s: %w", id, store.ErrOwnerErasing)
	}
	return nil
}

// ReleaseHold lifts one hold on owner: the hold id names, or, without
// one, the only hold on the target (backup "" for the owner itself);
// several there is ErrHoldAmbiguous, none ErrHoldNotFound. Other holds
// on the target stand. Audited (hold.release).
func (cat *Catalog) ReleaseHold(ctx context.Context, principal, owner, backup, id string) (store.Hold, error) {
	if err := records.CheckOwner(owner); err != nil {
		return store.Hold{}, invalid(err)
	}
	if backup != "" {
		if err := CheckBackupID(backup); err != nil {
			return store.Hold{}, invalid(err)
		}
	}
	if id != "" {
		if err := checkHoldID(id); err != nil {
			return store.Hold{}, invalid(err)
		}
	}
	holds, err := cat.cfg.Store.ListHolds(ctx, owner)
	if err != nil {
		return store.Hold{}, err
	}
	var match []store.Hold
	for _, h := range holds {
		if (id != "" && h.ID == id && (backup == "" || h.Backup == backup)) || (id == "" && h.Backup == backup) {
			match = append(match, h)
		}
	}
	switch {
	case len(match) == 0:
		return store.Hold{}, ErrHoldNotFound
	case len(match) > 1:
		return store.Hold{}, fmt.Errorf("%d holds: %w", len(match), ErrHoldAmbiguous)
	}
	h := match[0]
	err = cat.cfg.Store.ReleaseHold(ctx, owner, h.ID)
	if errors.Is(err, store.ErrNotFound) {
		return store.Hold{}, ErrHoldNotFound
	}
	if err != nil {
		return store.Hold{}, err
	}
	cat.cfg.Log.Info("audit: legal hold released", zap.String("audit", "hold.release"), zap.String("principal", principal),
		zap.String("owner", owner), zap.String("backup", h.Backup), zap.String("hold", h.ID), zap.String("held_by", h.Principal))
	return h, nil
}

// ErrHoldNotFound: no hold on what the request names.
var ErrHoldNotFound = fault.New(fault.NotFound, "no such hold")

// Holds returns the owner's holds, lapsed ones included.
func (cat *Catalog) Holds(ctx context.Context, owner string) ([]store.Hold, error) {
	return cat.cfg.Store.ListHolds(ctx, owner)
}

// heldTest reads owner's holds once and returns what holds a backup now.
func (cat *Catalog) heldTest(ctx context.Context, owner string) (func(store.Backup) bool, error) {
	holds, err := cat.cfg.Store.ListHolds(ctx, owner)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	return func(b store.Backup) bool { return HoldOn(holds, b.ID, now) != nil }, nil
}

// HoldOn is the hold in force at now that keeps backup id among an
// owner's holds (its own, else the owner's), or nil.
func HoldOn(holds []store.Hold, id string, now time.Time) *store.Hold {
	var ownerWide *store.Hold
	for i := range holds {
		h := &holds[i]
		if !h.InForce(now) {
			continue
		}
		switch h.Backup {
		case id:
			return h
		case "":
			ownerWide = h
		}
	}
	return ownerWide
}

// checkReason checks a reason an audit record keeps: required, at most
// limit bytes of printable UTF-8; what names what it is for.
func checkReason(reason string, limit int, what string) error {
	if reason == "" {
		return fmt.Errorf("reason: required (%s)", what)
	}
	if len(reason) > limit {
		return fmt.Errorf("reason: %d bytes, at most %d", len(reason), limit)
	}
	if !utf8.ValidString(reason) {
		return errors.New("reason: not UTF-8")
	}
	for _, r := range reason {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("reason: holds %U, not printable", r)
		}
	}
	return nil
}
