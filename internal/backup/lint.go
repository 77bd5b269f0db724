package backup

import (
	"context"
	"errors"
	"time"

	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/records"
	"github.com/contentbackup/contentbackup/internal/store"
)

// Finding is a stored record that the reference's import would refuse or
// crash on: Kind is "group", "message" or "consent".
type Finding struct {
	Kind string
	// ID is the group's or message's id; for consent, nil.
	ID []byte
	// ConsentType and Entity name a consent record.
	ConsentType cs.ConsentTypeSave
	Entity      string
	// Field and Problem are the rule as the write path states it.
	Field, Problem string
	// Repair is what RepairNonconforming would change; "" when no repair
	// is lossless and an export leaves the record out.
	Repair string
	// Messages, for a group left out, is how many of its messages go with
	// it.
	Messages uint64
}

// LintCounts is what a lint read and found.
type LintCounts struct {
	Groups, Messages, Consent uint64
	Findings, Repairable      uint64
}

// Lint calls found for each of the owner's records that an export without
// a window would write now and that the reference's import would refuse or
// crash on, with the rule and the repair an export would make. It reads
// one snapshot, as an export does, holding one record at a time.
func Lint(ctx context.Context, st store.Store, owner string, found func(Finding) error) (LintCounts, error) {
	var c LintCounts
	now := time.Now().UnixNano()
	report := func(f Finding, err error) error {
		var fe *records.FieldError
		if errors.As(err, &fe) {
			f.Field, f.Problem = fe.Field, fe.Reason
		} else {
			f.Problem = err.Error()
		}
		c.Findings++
		if f.Repair != "" {
			c.Repairable++
		}
		return found(f)
	}
	err := st.Snapshot(ctx, owner, func(snap store.Snapshot) error {
		err := snap.EachGroup(ctx, func(g *gb.GroupSave) error {
			if !GroupEligible(g) {
				return nil
			}
			c.Groups++
			q := store.MessageQuery{GroupID: g.GetId()}
			gerr := records.CheckArchivedGroup(g)
			f := Finding{Kind: "group", ID: g.GetId()}
			if _, what, ok := records.RepairGroup(g); ok {
				f.Repair = what
			}
			var leftOut uint64
			err := snap.EachMessage(ctx, q, func(m *mb.GroupMessageSave) error {
				if !MessageEligible(m, now, false) {
					return nil
				}
				c.Messages++
				if gerr != nil && f.Repair == "" {
					leftOut++
					return nil
				}
				if err := records.CheckMessage(m); err != nil {
					return report(Finding{Kind: "message", ID: m.GetId()}, err)
				}
				return nil
			})
			if err != nil || gerr == nil {
				return err
			}
			f.Messages = leftOut
			return report(f, gerr)
		})
		if err != nil {
			return err
		}
		return snap.EachConsent(ctx, func(r *cs.ConsentSave) error {
			c.Consent++
			if err := records.CheckConsent(r); err != nil {
				return report(Finding{Kind: "consent", ConsentType: r.GetEntityType(), Entity: r.GetEntity()}, err)
			}
			return nil
		})
	})
	return c, err
}
