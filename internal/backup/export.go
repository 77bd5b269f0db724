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
	"sync/atomic"

	"golang.org/x/sync/semaphore"
	"google.golang.org/protobuf/proto"

	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/archive"
	"github.com/contentbackup/contentbackup/internal/codec"
	"github.com/contentbackup/contentbackup/internal/fault"
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

// FaultKind: the caller's options.
func (e *OptionsError) FaultKind() fault.Kind { return fault.Invalid }

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

// Counts is what an export wrote, per element kind, and the stored
// records it left out or repaired as nonconforming.
type Counts struct {
	Groups, Messages, Consent uint64
	Excluded, Repaired        uint64
	// ChangeSeq is the owner's change sequence the export's snapshot saw:
	// an increment built on this export starts after it.
	ChangeSeq int64
}

// Nonconforming is what an export does with a stored record the
// reference's import would refuse or crash on: one the write path now
// refuses but that was stored before it did.
type Nonconforming int

const (
	// FailNonconforming fails the export with an UnexportableError.
	FailNonconforming Nonconforming = iota
	// ExcludeNonconforming leaves the record out (a group with its
	// messages: the reference refuses a message of a group it lacks).
	ExcludeNonconforming
	// RepairNonconforming writes the record repaired where the repair is
	// lossless (records.RepairGroup), and leaves it out otherwise.
	RepairNonconforming
)

// ExportConfig is what changes an export beside its owner, key and
// options.
type ExportConfig struct {
	Nonconforming Nonconforming
	// Written, when set, counts the records written so far (the metadata
	// included), for a caller that reports progress while the export runs.
	Written *atomic.Uint64
	// ChangedAfter, when set, makes the export an increment: only what
	// was written after that point of the owner's change sequence (the
	// base's Counts.ChangeSeq), under the same rules, with the group of
	// every message it holds, so that it imports on its own. Import only
	// adds, so an increment is restored with its chain read as one
	// snapshot (Chain), never after its base.
	ChangedAfter *int64
}

// Export writes the owner's archive to w under key: the metadata element,
// then, when messages are selected, each eligible group followed by its
// eligible messages (ARCH-007), then, when consent is selected, every
// consent record. It reads one consistent snapshot, and exportedAtNs is the
// single export time every rule is measured at. Any read or write failure
// fails the export; a failed export's bytes are not an archive (ARCH-017).
//
// Reading and writing overlap: a goroutine reads the snapshot and applies
// the rules, handing elements on in batches, while the caller's goroutine
// seals and compresses them into w. What waits between the two is bounded
// by bytes (ExportMemory).
func Export(ctx context.Context, st store.Store, owner string, key []byte, opts *ds.ArchiveOptions, exportedAtNs int64, w io.Writer, cfg ExportConfig) (Counts, error) {
	written := cfg.Written
	opts, err := Resolve(opts)
	if err != nil {
		return Counts{}, err
	}
	aw, err := archive.NewWriter(w, key)
	if err != nil {
		return Counts{}, err
	}
	meta := &ds.BackupMetadataSave{Elements: opts.Elements, ExportedAtNs: exportedAtNs, StartNs: opts.StartNs, EndNs: opts.EndNs}
	if err := aw.WriteElement(&ds.BackupElement{Element: &ds.BackupElement_Metadata{Metadata: meta}}); err != nil {
		return Counts{}, err
	}
	if written != nil {
		written.Add(1)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rd := &exportReader{opts: opts, exportedAtNs: exportedAtNs, nonconforming: cfg.Nonconforming, out: make(chan exportBatch, exportBatchesAhead),
		ahead: semaphore.NewWeighted(ExportReadAhead), changedAfter: cfg.ChangedAfter}
	read := make(chan error, 1)
	go func() {
		defer close(rd.out)
		read <- st.Snapshot(ctx, owner, func(snap store.Snapshot) error { return rd.run(ctx, snap) })
	}()
	var writeErr error
	for batch := range rd.out {
		for _, el := range batch.elements {
			if writeErr == nil {
				writeErr = aw.WriteElement(el)
			}
		}
		rd.ahead.Release(batch.weight)
		if written != nil && writeErr == nil {
			written.Add(uint64(len(batch.elements)))
		}
		if writeErr != nil {
			cancel() // the reader stops; its batches are drained here
		}
	}
	readErr := <-read
	switch {
	case writeErr != nil:
		return rd.counts, fmt.Errorf("export: %w", writeErr)
	case readErr != nil:
		return rd.counts, fmt.Errorf("export: %w", readErr)
	}
	if err := aw.Close(); err != nil {
		return rd.counts, fmt.Errorf("export: %w", err)
	}
	return rd.counts, nil
}

// What an export's reader may hand on before the writer takes it.
const (
	// ExportReadAhead is the most bytes of elements waiting between the
	// reader and the writer; a larger element waits alone.
	ExportReadAhead = 4 << 20
	// exportBatchBytes and exportBatchElements end a batch, whichever
	// comes first: enough to make a channel send rare, small enough to
	// keep both sides busy.
	exportBatchBytes    = 256 << 10
	exportBatchElements = 256
	exportBatchesAhead  = ExportReadAhead / exportBatchBytes
)

// ExportReservation is what one export holds for its whole run, its
// records at most maxRecord bytes: the writer's buffers and the zstd block
// being filled (which holds a whole record when one is larger), and what
// its reader holds and hands on (ExportMemory). Every caller (the Export
// stream, an export job) reserves it before the export starts, and adds
// its own output buffers.
func ExportReservation(maxRecord int64) int64 {
	return 4<<20 + maxRecord + ExportMemory(maxRecord)
}

// ExportMemory is the most an export holds in elements at once, its
// records at most maxRecord bytes each: the read-ahead, the batch being
// filled and the batch being written.
func ExportMemory(maxRecord int64) int64 {
	return ExportReadAhead + 2*(exportBatchBytes+maxRecord)
}

// exportReader reads the snapshot, applies the export rules and hands the
// elements to write on in batches.
type exportReader struct {
	opts          *ds.ArchiveOptions
	exportedAtNs  int64
	nonconforming Nonconforming
	changedAfter  *int64
	out           chan exportBatch
	ahead         *semaphore.Weighted // bytes handed on and not yet written
	batch         exportBatch
	counts        Counts // read by Export after the reader ends
}

type exportBatch struct {
	elements []*ds.BackupElement
	bytes    int64 // the elements' approximate size
	weight   int64 // what it holds of ahead
}

func (rd *exportReader) run(ctx context.Context, snap store.Snapshot) error {
	seq, err := snap.ChangeSeq(ctx)
	if err != nil {
		return err
	}
	rd.counts.ChangeSeq = seq
	if rd.changedAfter != nil {
		snap = snap.ChangedAfter(*rd.changedAfter)
	}
	if slices.Contains(rd.opts.Elements, selMessages) {
		if err := rd.conversations(ctx, snap); err != nil {
			return err
		}
	}
	if slices.Contains(rd.opts.Elements, selConsent) {
		err := snap.EachConsent(ctx, func(c *cs.ConsentSave) error {
			if err := records.CheckConsent(c); err != nil {
				if rd.nonconforming == FailNonconforming {
					return &UnexportableError{Kind: "consent", ID: []byte(c.GetEntity()), Err: err}
				}
				rd.counts.Excluded++
				return nil
			}
			rd.counts.Consent++
			return rd.emit(ctx, &ds.BackupElement{Element: &ds.BackupElement_Consent{Consent: c}}, int64(len(c.GetEntity()))+32)
		})
		if err != nil {
			return err
		}
	}
	return rd.flush(ctx)
}

// emit adds an element of about size bytes to the batch, handing the batch
// on when it is full.
func (rd *exportReader) emit(ctx context.Context, el *ds.BackupElement, size int64) error {
	rd.batch.elements = append(rd.batch.elements, el)
	rd.batch.bytes += size
	if rd.batch.bytes >= exportBatchBytes || len(rd.batch.elements) >= exportBatchElements {
		return rd.flush(ctx)
	}
	return nil
}

func (rd *exportReader) flush(ctx context.Context) error {
	if len(rd.batch.elements) == 0 {
		return nil
	}
	b := rd.batch
	rd.batch = exportBatch{elements: make([]*ds.BackupElement, 0, exportBatchElements)}
	b.weight = min(b.bytes, ExportReadAhead)
	if err := rd.ahead.Acquire(ctx, b.weight); err != nil {
		return err
	}
	select {
	case rd.out <- b:
		return nil
	case <-ctx.Done():
		rd.ahead.Release(b.weight)
		return ctx.Err()
	}
}

// UnexportableError is an eligible record that an importer would refuse
// (stored before the service refused such records at the door): the export
// fails rather than omit it (ARCH-017) or write what the reference's
// importer stops at.
type UnexportableError struct {
	Kind string // "group", "message" or "consent"
	ID   []byte // a consent record's entity
	Err  error
}

func (e *UnexportableError) Error() string {
	if e.Kind == "consent" {
		return fmt.Sprintf("consent record for %q cannot be exported: %v", codec.Abbrev(string(e.ID)), e.Err)
	}
	return fmt.Sprintf("%s %x cannot be exported: %v", e.Kind, e.ID, e.Err)
}
func (e *UnexportableError) Unwrap() error { return e.Err }

// FaultKind: the stored record, not the request, stands in the way
// (the nonconforming option or a repair of the record removes it).
func (e *UnexportableError) FaultKind() fault.Kind { return fault.FailedPrecondition }

func (rd *exportReader) conversations(ctx context.Context, snap store.Snapshot) error {
	opts := rd.opts
	return snap.EachGroup(ctx, func(g *gb.GroupSave) error {
		if !GroupEligible(g) {
			return nil
		}
		// The window bounds messages only, never groups (ARCH-009): a group
		// with no message in it still carries its history.
		// With exclude_disappearing_messages the store leaves out restored
		// messages of unknown expiry; MessageEligible, those with one.
		q := store.MessageQuery{GroupID: g.GetId(), StartNs: opts.StartNs, EndNs: opts.EndNs,
			ExcludeRestoredUnknownExpiry: opts.GetExcludeDisappearingMessages(), LiveAtNs: rd.exportedAtNs}
		if err := records.CheckArchivedGroup(g); err != nil {
			repaired, _, ok := records.RepairGroup(g)
			switch {
			case rd.nonconforming == FailNonconforming:
				return &UnexportableError{Kind: "group", ID: g.GetId(), Err: err}
			case rd.nonconforming == RepairNonconforming && ok:
				g = repaired
				rd.counts.Repaired++
			default:
				rd.counts.Excluded++
				return snap.EachMessage(ctx, q, func(m *mb.GroupMessageSave) error {
					if MessageEligible(m, rd.exportedAtNs, opts.GetExcludeDisappearingMessages()) {
						rd.counts.Excluded++
					}
					return nil
				})
			}
		}
		if err := rd.emit(ctx, &ds.BackupElement{Element: &ds.BackupElement_Group{Group: g}}, int64(proto.Size(g))); err != nil {
			return err
		}
		rd.counts.Groups++
		return snap.EachMessage(ctx, q, func(m *mb.GroupMessageSave) error {
			if !MessageEligible(m, rd.exportedAtNs, opts.GetExcludeDisappearingMessages()) {
				return nil
			}
			if err := records.CheckMessage(m); err != nil {
				if rd.nonconforming == FailNonconforming {
					return &UnexportableError{Kind: "message", ID: m.GetId(), Err: err}
				}
				rd.counts.Excluded++
				return nil
			}
			records.ExportForm(m)
			rd.counts.Messages++
			el := &ds.BackupElement{Element: &ds.BackupElement_GroupMessage{GroupMessage: m}}
			return rd.emit(ctx, el, int64(archive.ElementSize(el)))
		})
	})
}

// GroupEligible is the eligibility table's group row (records.GroupExportable).
func GroupEligible(g *gb.GroupSave) bool { return records.GroupExportable(g) }

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
