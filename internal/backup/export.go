// Package backup holds the archive rules between the container
// (internal/archive) and the store: what an export selects and writes
// (ARCH-006..-010, -017, -019, -026) and how an import merges each element
// (ARCH-013..-016, -020, -021, -024). The gRPC layer only moves bytes in
// and out of it.
package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/archive"
	"github.com/contentbackup/contentbackup/internal/records"
	"github.com/contentbackup/contentbackup/internal/store"
)

const (
	selMessages = ds.BackupElementSelection_BACKUP_ELEMENT_SELECTION_MESSAGES
	selConsent  = ds.BackupElementSelection_BACKUP_ELEMENT_SELECTION_CONSENT
	selEvent    = ds.BackupElementSelection_BACKUP_ELEMENT_SELECTION_EVENT //lint:ignore SA1019 accepted and selects nothing
)

// OptionsError is an export request's options that cannot be honoured.
type OptionsError struct{ Field, Reason string }

func (e *OptionsError) Error() string { return e.Field + ": " + e.Reason }

// Resolve applies ARCH-017's defaults: absent options select both
// categories with no window and keep disappearing messages. Present
// options are taken as given: an empty selection stays empty. (A repeated
// protobuf field cannot tell an omitted list from an empty one, so the
// absence of the whole options message is what "omitted" means here.)
func Resolve(opts *ds.ArchiveOptions) (*ds.ArchiveOptions, error) {
	if opts == nil {
		return &ds.ArchiveOptions{Elements: []ds.BackupElementSelection{selMessages, selConsent}}, nil
	}
	var sel []ds.BackupElementSelection
	for i, e := range opts.GetElements() {
		switch e {
		case selMessages, selConsent, selEvent:
		default:
			return nil, &OptionsError{fmt.Sprintf("options.elements[%d]", i), fmt.Sprintf("%d is not a selection this server exports", e)}
		}
		if !slices.Contains(sel, e) {
			sel = append(sel, e)
		}
	}
	if opts.StartNs != nil && opts.EndNs != nil && opts.GetStartNs() > opts.GetEndNs() {
		return nil, &OptionsError{"options.start_ns", fmt.Sprintf("%d is after end_ns %d", opts.GetStartNs(), opts.GetEndNs())}
	}
	return &ds.ArchiveOptions{Elements: sel, StartNs: opts.StartNs, EndNs: opts.EndNs, ExcludeDisappearingMessages: opts.GetExcludeDisappearingMessages()}, nil
}

// Counts is what an export wrote, per element kind.
type Counts struct {
	Groups, Messages, Consent uint64
}

// Export writes the owner's archive to w under key: the metadata element,
// then, when messages are selected, each eligible group followed by its
// eligible messages (ARCH-007), then, when consent is selected, every
// consent record. It reads one consistent snapshot, and exportedAtNs is the
// single export time every rule is measured at. Any read or write failure
// fails the export; a failed export's bytes are not an archive (ARCH-017).
func Export(ctx context.Context, st store.Store, owner string, key []byte, opts *ds.ArchiveOptions, exportedAtNs int64, w io.Writer) (Counts, error) {
	var counts Counts
	opts, err := Resolve(opts)
	if err != nil {
		return counts, err
	}
	aw, err := archive.NewWriter(w, key, archive.WriterOptions{})
	if err != nil {
		return counts, err
	}
	meta := &ds.BackupMetadataSave{Elements: opts.Elements, ExportedAtNs: exportedAtNs, StartNs: opts.StartNs, EndNs: opts.EndNs}
	if err := aw.WriteElement(&ds.BackupElement{Element: &ds.BackupElement_Metadata{Metadata: meta}}); err != nil {
		return counts, err
	}
	err = st.Snapshot(ctx, owner, func(snap store.Snapshot) error {
		if slices.Contains(opts.Elements, selMessages) {
			if err := exportConversations(ctx, snap, aw, opts, exportedAtNs, &counts); err != nil {
				return err
			}
		}
		if slices.Contains(opts.Elements, selConsent) {
			return snap.EachConsent(ctx, func(c *cs.ConsentSave) error {
				counts.Consent++
				return aw.WriteElement(&ds.BackupElement{Element: &ds.BackupElement_Consent{Consent: c}})
			})
		}
		return nil
	})
	if err != nil {
		return counts, fmt.Errorf("export: %w", err)
	}
	if err := aw.Close(); err != nil {
		return counts, fmt.Errorf("export: %w", err)
	}
	return counts, nil
}

// UnexportableError is an eligible record that an importer would refuse
// (stored before the service refused such records at the door): the export
// fails rather than omit it (ARCH-017) or write what the reference's
// importer stops at.
type UnexportableError struct {
	Kind string // "group" or "message"
	ID   []byte
	Err  error
}

func (e *UnexportableError) Error() string {
	return fmt.Sprintf("%s %x cannot be exported: %v", e.Kind, e.ID, e.Err)
}
func (e *UnexportableError) Unwrap() error { return e.Err }

func exportConversations(ctx context.Context, snap store.Snapshot, aw *archive.Writer, opts *ds.ArchiveOptions, exportedAtNs int64, counts *Counts) error {
	return snap.EachGroup(ctx, func(g *gb.GroupSave) error {
		if !GroupEligible(g) {
			return nil
		}
		if err := records.CheckArchivedGroup(g); err != nil {
			return &UnexportableError{Kind: "group", ID: g.GetId(), Err: err}
		}
		if err := aw.WriteElement(&ds.BackupElement{Element: &ds.BackupElement_Group{Group: g}}); err != nil {
			return err
		}
		counts.Groups++
		// The window bounds messages only, never groups (ARCH-009): a group
		// with no message in it still carries its history.
		// With exclude_disappearing_messages the store leaves out restored
		// messages of unknown expiry; MessageEligible, those with one.
		q := store.MessageQuery{GroupID: g.GetId(), StartNs: opts.StartNs, EndNs: opts.EndNs,
			ExcludeRestoredUnknownExpiry: opts.GetExcludeDisappearingMessages()}
		return snap.EachMessage(ctx, q, func(m *mb.GroupMessageSave) error {
			if !MessageEligible(m, exportedAtNs, opts.GetExcludeDisappearingMessages()) {
				return nil
			}
			if err := records.CheckMessage(m); err != nil {
				return &UnexportableError{Kind: "message", ID: m.GetId(), Err: err}
			}
			counts.Messages++
			return aw.WriteElement(&ds.BackupElement{Element: &ds.BackupElement_GroupMessage{GroupMessage: m}})
		})
	})
}

// GroupEligible is the eligibility table's group row: every group and DM,
// excluding sync and one-shot conversations (ARCH-010) and Restored ones
// (ARCH-026).
func GroupEligible(g *gb.GroupSave) bool {
	switch g.GetConversationType() {
	case gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_SYNC, gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_ONESHOT:
		return false
	}
	return g.GetMembershipState() != gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_RESTORED
}

// MessageEligible is the message row, past the window and the restored
// rule the store applied: application messages only, whose expiry is
// absent or after the export time; with exclude_disappearing_messages,
// none with an expiry (ARCH-009). A live message whose expiry is unknown
// stays: ARCH-009 leaves out only restored ones, which the store knows
// (MessageQuery.ExcludeRestoredUnknownExpiry).
func MessageEligible(m *mb.GroupMessageSave, exportedAtNs int64, excludeDisappearing bool) bool {
	if m.GetKind() != mb.GroupMessageKindSave_GROUP_MESSAGE_KIND_SAVE_APPLICATION {
		return false
	}
	if m.ExpiresAtNs != nil && m.GetExpiresAtNs() <= exportedAtNs {
		return false
	}
	if excludeDisappearing && m.ExpiresAtNs != nil {
		return false
	}
	return true
}

// IsOptionsError reports whether err is a request's options being wrong.
func IsOptionsError(err error) bool {
	var oe *OptionsError
	return errors.As(err, &oe)
}
