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

// SetHold places (or replaces) a hold on owner, or on one of its
// backups when h.Backup is set, for principal. It is audited.
func (m *Manager) SetHold(ctx context.Context, principal string, h store.Hold) (store.Hold, error) {
	if err := records.CheckOwner(h.Owner); err != nil {
		return store.Hold{}, invalid(err)
	}
	if err := checkReason(h.Reason, maxHoldReason, "the case or request the hold is for"); err != nil {
		return store.Hold{}, invalid(err)
	}
	now := time.Now()
	if !h.Until.IsZero() && !h.Until.After(now) {
		return store.Hold{}, invalid(errors.New("end_time: in the past; omit it for a hold that lasts until released"))
	}
	if h.Until.After(MaxHoldEnd) {
		// Stored as nanoseconds since the epoch: a later time would wrap
		// to the past and the "held" backup be deleted.
		return store.Hold{}, invalid(fmt.Errorf("end_time: after %s, the latest the store holds; omit it for a hold that lasts until released", MaxHoldEnd.Format(time.RFC3339)))
	}
	if h.Backup != "" {
		if _, err := m.Backup(ctx, h.Owner, h.Backup); err != nil {
			return store.Hold{}, err
		}
	}
	h.Principal, h.Created = principal, now
	if err := m.erasureFence(ctx, h.Owner); err != nil {
		return store.Hold{}, err
	}
	previous, err := m.holdOn(ctx, h.Owner, h.Backup)
	if err != nil {
		return store.Hold{}, err
	}
	if err := m.cfg.Store.SetHold(ctx, h); err != nil {
		return store.Hold{}, err
	}
	// Checked again once stored: an erasure reads the owner's holds after
	// its job is stored, so a hold stored before that job is seen by it
	// (and the erasure refused), and one stored after is seen here and
	// taken back. Never both missed: a hold answered in force is never
	// erased (issue 46, finding 4).
	if err := m.erasureFence(ctx, h.Owner); err != nil {
		undo := func(uctx context.Context) error { return m.cfg.Store.ReleaseHold(uctx, h.Owner, h.Backup) }
		if previous != nil {
			undo = func(uctx context.Context) error { return m.cfg.Store.SetHold(uctx, *previous) }
		}
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if uerr := undo(uctx); uerr != nil && !errors.Is(uerr, store.ErrNotFound) {
			m.cfg.Log.Error("a hold refused by an erasure could not be taken back", zap.String("owner", h.Owner), zap.String("backup", h.Backup), zap.Error(uerr))
		}
		return store.Hold{}, err
	}
	m.cfg.Log.Info("audit: legal hold set", zap.String("audit", "hold.set"), zap.String("principal", principal),
		zap.String("owner", h.Owner), zap.String("backup", h.Backup), zap.Time("until", h.Until))
	return h, nil
}

// erasureFence refuses an owner an erasure is running for.
func (m *Manager) erasureFence(ctx context.Context, owner string) error {
	id, err := m.cfg.Store.RunningErasure(ctx, owner)
	if err != nil {
		return err
	}
	if id != "" {
		return fmt.Errorf("erasure %s: %w", id, store.ErrOwnerErasing)
	}
	return nil
}

// holdOn returns the hold stored on owner's backup ("" for the owner),
// or nil.
func (m *Manager) holdOn(ctx context.Context, owner, backup string) (*store.Hold, error) {
	holds, err := m.cfg.Store.ListHolds(ctx, owner)
	if err != nil {
		return nil, err
	}
	for _, h := range holds {
		if h.Backup == backup {
			return &h, nil
		}
	}
	return nil, nil
}

// ReleaseHold lifts the hold on owner (backup "") or on one of its
// backups. It is audited; a missing hold is ErrHoldNotFound.
func (m *Manager) ReleaseHold(ctx context.Context, principal, owner, backup string) error {
	if err := records.CheckOwner(owner); err != nil {
		return invalid(err)
	}
	if backup != "" {
		if err := CheckBackupID(backup); err != nil {
			return invalid(err)
		}
	}
	err := m.cfg.Store.ReleaseHold(ctx, owner, backup)
	if errors.Is(err, store.ErrNotFound) {
		return ErrHoldNotFound
	}
	if err != nil {
		return err
	}
	m.cfg.Log.Info("audit: legal hold released", zap.String("audit", "hold.release"), zap.String("principal", principal),
		zap.String("owner", owner), zap.String("backup", backup))
	return nil
}

// ErrHoldNotFound: no hold on what the request names.
var ErrHoldNotFound = fault.New(fault.NotFound, "no such hold")

// Holds returns the owner's holds, lapsed ones included.
func (m *Manager) Holds(ctx context.Context, owner string) ([]store.Hold, error) {
	return m.cfg.Store.ListHolds(ctx, owner)
}

// heldTest reads owner's holds once and returns what holds a backup now.
func (m *Manager) heldTest(ctx context.Context, owner string) (func(store.Backup) bool, error) {
	holds, err := m.cfg.Store.ListHolds(ctx, owner)
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
