package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"time"

	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"

	"github.com/contentbackup/contentbackup/internal/archive"
	"github.com/contentbackup/contentbackup/internal/budget"
	"github.com/contentbackup/contentbackup/internal/fault"
	"github.com/contentbackup/contentbackup/internal/records"
	"github.com/contentbackup/contentbackup/internal/store"
)

// importBatch is the most consecutive messages (or consent records)
// written per store call: enough to amortise a transaction. Memory is
// bounded by bytes, not by this count: see ImportOptions.ReadAhead.
const importBatch = 4000

// ImportOptions bounds an import.
type ImportOptions struct {
	// Limits are the record size limits every way in enforces; an archive
	// record over one fails with its number, as any invalid record.
	Limits records.Limits
	// Reader sets the archive reader's limits and meter.
	Reader archive.ReaderOptions
	// ReadAhead, when set, is charged with every record read before it is
	// applied (twice its encoded size: the bytes and the parsed element)
	// and released once it is: reading waits while the budget is held, so
	// memory is bounded by bytes whatever the records' count or size. It
	// must hold at least two of the largest records.
	ReadAhead *budget.Call
	// ReadAheadBytes is ReadAhead's limit, which decides when buffered
	// records are written (at half of it).
	ReadAheadBytes int64
	// Progress, when set, counts the records taken in so far (the metadata
	// included; they reach the store in batches), for a caller that reports
	// progress while import runs.
	Progress *atomic.Uint64
	// ValidateOnly reads and authenticates the whole archive and reports
	// what the import would insert, update and leave unchanged, by the
	// store's own merge rules, writing nothing (AIP-163).
	ValidateOnly bool
}

// ElementCounts is what an import did with one kind of element.
type ElementCounts struct {
	Inserted, Updated, Unchanged uint64
}

func (c *ElementCounts) add(outcomes []store.Outcome) {
	for _, o := range outcomes {
		switch o {
		case store.Inserted:
			c.Inserted++
		case store.Updated:
			c.Updated++
		default:
			c.Unchanged++
		}
	}
}

// ImportResult is what an import read and applied.
type ImportResult struct {
	Metadata                  *ds.BackupMetadataSave
	Groups, Messages, Consent ElementCounts
	// Records read, Skipped (unset, unknown, event: ARCH-005; and the
	// Expired) and Legacy (opened under the nonce retry of ARCH-002).
	Records, Skipped, Legacy uint64
	// Expired: messages that had expired when the import read them,
	// never stored (the purge would delete them, and importing the same
	// archive again would store them again: ARCH-016).
	Expired uint64
}

// ReaderReservation is what an archive reader under opts holds at most:
// its window and buffers, which grow with the largest record read (a
// record buffer grows by doubling, so it may pass the record size by one
// step before the record is whole). Import streams, import jobs and
// Verify reserve it before reading.
func ReaderReservation(opts archive.ReaderOptions) int64 {
	return archive.ReaderMemory(opts) + 4<<20
}

// ImportError is an import that stopped at a record. Everything before
// that record is applied; it and everything after are not (ARCH-021).
type ImportError struct {
	Record uint64
	Err    error
}

func (e *ImportError) Error() string {
	return fmt.Sprintf("import stopped at record %d: %v", e.Record, e.Err)
}
func (e *ImportError) Unwrap() error { return e.Err }

// ErrMissingGroup: a message names a group that neither the store nor an
// earlier record of the archive holds (ARCH-007, ARCH-021).
var ErrMissingGroup = fault.NewReason(fault.FailedPrecondition, fault.ReasonMissingGroup, "the message's group is neither stored nor earlier in the archive")

// Import reads an archive from r under key and applies it to the owner's
// store as it goes, in bounded memory:
//   - a message whose id is stored is left unchanged (ARCH-013), its
//     identifier fields derived from a typed envelope (ARCH-008);
//   - a stored group keeps its state, membership and metadata, and its
//     last_message_ns becomes the greater (ARCH-014); a new group is
//     created Restored with every archived value kept (ARCH-015, ARCH-020,
//     ARCH-024);
//   - consent merges by NOTES.md's rule (greater consented_at_ns wins).
//
// Importing the same archive again changes nothing (ARCH-016). On failure
// it returns an *ImportError naming the record: the records before it are
// applied, it and the later ones are not, and a retry from the start
// applies the rest under the same rules (ARCH-021).
//
// The same entry serves the Import stream, import jobs and tests; opts
// carries the reader's limits, the record limits and the read-ahead the
// caller reserved.
func Import(ctx context.Context, st store.Store, owner string, key []byte, r io.Reader, opts ImportOptions) (res ImportResult, err error) {
	ar, err := archive.NewReader(r, key, opts.Reader)
	if err != nil {
		return res, err
	}
	defer ar.Close()
	return ImportFrom(ctx, st, owner, ar, opts)
}

// Source is what an import reads: one archive (*archive.Reader) or a
// chain of backups read as one snapshot (*Chain).
type Source interface {
	// Metadata is record 0's metadata.
	Metadata() (*ds.BackupMetadataSave, error)
	// Next returns the next element, io.EOF after the last.
	Next() (*ds.BackupElement, error)
	// Record is the number of the element Next last returned.
	Record() uint64
	// Stats reports what has been read so far.
	Stats() archive.Stats
}

// ImportFrom is Import reading src, whose metadata is not yet read.
func ImportFrom(ctx context.Context, st store.Store, owner string, src Source, opts ImportOptions) (res ImportResult, err error) {
	ar := src
	if opts.ValidateOnly {
		st = newPlanner(st)
	}
	im := &importer{ctx: ctx, st: st, owner: owner, res: &res, groups: make(map[string]bool), limits: opts.Limits, ahead: opts.ReadAhead, nowNs: time.Now().UnixNano()}
	if opts.ReadAhead != nil {
		im.flushAt = opts.ReadAheadBytes / 2
	}
	if res.Metadata, err = ar.Metadata(); err != nil {
		return res, err
	}
	if opts.Progress != nil {
		opts.Progress.Add(1)
	}
	// Reading (decompressing, opening, parsing) runs one step ahead of
	// applying, so the two overlap; records are still applied one after
	// another, in order, and the reader stops when applying does.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	records := make(chan readRecord, readAhead)
	go readRecords(ctx, ar, records, opts.ReadAhead)
	defer func() {
		cancel()
		// A batch still in flight (an early return) ends before Import
		// does; its outcome no longer matters.
		if im.inflight != nil {
			<-im.inflight
		}
		for range records { // wait for the reader to stop before its stats
		}
		stats := ar.Stats()
		res.Records, res.Skipped, res.Legacy = stats.Records, res.Skipped+stats.Skipped, stats.Legacy
	}()
	for rec := range records {
		if rec.err == nil {
			rec.err = im.apply(rec.num, rec.el, rec.cost)
		}
		if rec.err == nil && opts.Progress != nil {
			opts.Progress.Add(1)
		}
		if rec.err != nil {
			// What is buffered came before the failing record: apply it,
			// then report the failure.
			if ferr := im.flush(); ferr != nil {
				return res, ferr
			}
			return res, rec.err
		}
	}
	if err := im.flush(); err != nil {
		return res, err
	}
	return res, ctx.Err()
}

// readAhead bounds how many parsed records wait to be applied; their bytes
// are bounded by ImportOptions.ReadAhead.
const readAhead = 256

// readRecord is one element read ahead, or the error that ended reading;
// cost is what it holds of the read-ahead budget.
type readRecord struct {
	num  uint64
	el   *ds.BackupElement
	cost int64
	err  error
}

// readRecords sends the archive's elements until its end, an error, or ctx
// is done, then closes out. Each element is charged to ahead (when set)
// before it is passed on; the applier releases it.
func readRecords(ctx context.Context, ar Source, out chan<- readRecord, ahead *budget.Call) {
	defer close(out)
	for {
		el, err := ar.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		rec := readRecord{num: ar.Record(), el: el, err: err}
		if err == nil && ahead != nil {
			rec.cost = 2 * int64(archive.ElementSize(el))
			if werr := ahead.Wait(ctx, rec.cost); werr != nil {
				rec.el, rec.cost, rec.err = nil, 0, &ImportError{Record: rec.num, Err: werr}
			}
		}
		select {
		case out <- rec:
		case <-ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

type importer struct {
	ctx    context.Context
	st     store.Store
	owner  string
	res    *ImportResult
	groups map[string]bool // group ids known to exist in the store
	limits records.Limits
	ahead  *budget.Call
	nowNs  int64 // when the import began: a message expired by then is skipped
	// flushAt is the buffered cost at which buffered records are written,
	// so the reader always has budget to read the next one.
	flushAt int64

	msgs       []*mb.GroupMessageSave
	msgRecords []uint64
	consent    []*cs.ConsentSave
	consentRec []uint64
	held       int64 // read-ahead budget the buffers hold

	// A batch of messages is written while the next one fills: at most
	// one is in flight, and every other write waits for it, so batches
	// still apply one after another, in record order (ARCH-021).
	inflight chan messageBatch
	spare    messageBatch // the last written batch's slices, for reuse
	// seenStored: a batch held messages the owner already had.
	seenStored bool
	// failed is a batch's failure, which every later write returns.
	failed error
}

// messageBatch is a batch of messages handed to the store, and once
// written, what came of it.
type messageBatch struct {
	msgs    []*mb.GroupMessageSave
	records []uint64
	held    int64
	out     []store.Outcome
	err     error
}

// release returns read-ahead budget.
func (im *importer) release(n int64) {
	if im.ahead != nil {
		im.ahead.Release(n)
	}
}

func (im *importer) apply(record uint64, el *ds.BackupElement, cost int64) error {
	buffered := false
	defer func() {
		if !buffered {
			im.release(cost)
		}
	}()
	fail := func(err error) error { return &ImportError{Record: record, Err: err} }
	switch e := el.GetElement().(type) {
	case *ds.BackupElement_Metadata:
		// Only record 0's metadata describes the archive; a later one
		// carries nothing to apply.
		im.res.Skipped++
	case *ds.BackupElement_Group:
		g := e.Group
		if err := errors.Join(records.CheckArchivedGroup(g), im.limits.CheckGroupSize(g)); err != nil {
			return fail(records.At("group", err))
		}
		// Groups go in as they come, so the messages after them find them.
		if err := im.flush(); err != nil {
			return err
		}
		out, err := im.st.MergeGroups(im.ctx, im.owner, []*gb.GroupSave{g})
		if err != nil {
			return fail(err)
		}
		im.res.Groups.add(out)
		im.groups[string(g.GetId())] = true
	case *ds.BackupElement_GroupMessage:
		m := e.GroupMessage
		if err := errors.Join(records.PrepareMessage(m), im.limits.CheckMessageSize(m)); err != nil {
			return fail(records.At("group_message", err))
		}
		if m.ExpiresAtNs != nil && m.GetExpiresAtNs() <= im.nowNs {
			im.res.Expired++
			im.res.Skipped++
			return nil
		}
		if !im.groups[string(m.GetGroupId())] {
			if err := im.flush(); err != nil {
				return err
			}
			_, err := im.st.GetGroup(im.ctx, im.owner, m.GetGroupId())
			if errors.Is(err, store.ErrNotFound) {
				return fail(fmt.Errorf("message %x names group %x: %w", m.GetId(), m.GetGroupId(), ErrMissingGroup))
			}
			if err != nil {
				return fail(err)
			}
			im.groups[string(m.GetGroupId())] = true
		}
		if err := im.flushConsent(); err != nil {
			return err
		}
		im.msgs, im.msgRecords = append(im.msgs, m), append(im.msgRecords, record)
		buffered, im.held = true, im.held+cost
		if len(im.msgs) >= importBatch || (im.flushAt > 0 && im.held >= im.flushAt) {
			return im.flushMessages()
		}
	case *ds.BackupElement_Consent:
		c := e.Consent
		if err := errors.Join(records.CheckConsent(c), im.limits.CheckConsentSize(c), records.CheckConsentTime(c, time.Now())); err != nil {
			return fail(records.At("consent", err))
		}
		if err := im.flushMessages(); err != nil {
			return err
		}
		if err := im.waitMessages(); err != nil {
			return err
		}
		im.consent, im.consentRec = append(im.consent, c), append(im.consentRec, record)
		buffered, im.held = true, im.held+cost
		if len(im.consent) >= importBatch || (im.flushAt > 0 && im.held >= im.flushAt) {
			return im.flushConsent()
		}
	}
	return nil
}

// flush writes what is buffered. The buffers hold only records before the
// one being applied, and only one kind at a time (a message flushes the
// consent buffer and the other way round), so a batch is always a run of
// consecutive records: when one fails, everything before its first record
// is applied and nothing from it on (ARCH-021).
func (im *importer) flush() error {
	if err := im.flushMessages(); err != nil {
		return err
	}
	if err := im.waitMessages(); err != nil {
		return err
	}
	return im.flushConsent()
}

// flushMessages hands the buffered messages to the store and returns
// without waiting for them to be written, after the batch before them is.
func (im *importer) flushMessages() error {
	if err := im.waitMessages(); err != nil {
		return err
	}
	if len(im.msgs) == 0 {
		return nil
	}
	b := messageBatch{msgs: im.msgs, records: im.msgRecords, held: im.held}
	mostlyNew := !im.seenStored
	im.msgs, im.msgRecords, im.held = im.spare.msgs[:0], im.spare.records[:0], 0
	im.inflight = make(chan messageBatch, 1)
	go func(done chan<- messageBatch) {
		b.out, b.err = im.st.AppendMessages(im.ctx, im.owner, b.msgs, store.AppendOptions{AllowRestored: true, MostlyNew: mostlyNew})
		// The batch's read-ahead is free once it is written, not when the
		// applier next looks: the reader may be waiting for it, and the
		// applier for the reader.
		clear(b.msgs)
		im.release(b.held)
		done <- b
	}(im.inflight)
	return nil
}

// waitMessages waits for the batch in flight, if any, and takes in what
// came of it.
func (im *importer) waitMessages() error {
	if im.failed != nil {
		return im.failed
	}
	if im.inflight == nil {
		return nil
	}
	b := <-im.inflight
	im.inflight = nil
	if b.err != nil {
		// Every group was checked, so this is the store failing: name the
		// batch's first record, from which a retry reapplies. Nothing
		// after it is applied, buffered or not (ARCH-021).
		im.failed = &ImportError{Record: b.records[0], Err: b.err}
		return im.failed
	}
	im.res.Messages.add(b.out)
	// Once a batch held stored messages (a second import of an archive,
	// ARCH-016), the next ones likely do too: the store looks ids up
	// first rather than write and fall back.
	im.seenStored = im.seenStored || slices.Contains(b.out, store.Unchanged)
	im.spare = b
	return nil
}

func (im *importer) flushConsent() error {
	if im.failed != nil {
		return im.failed
	}
	if len(im.consent) == 0 {
		return nil
	}
	out, err := im.st.MergeConsent(im.ctx, im.owner, im.consent)
	if err != nil {
		return &ImportError{Record: im.consentRec[0], Err: err}
	}
	im.res.Consent.add(out)
	clear(im.consent)
	im.consent, im.consentRec = im.consent[:0], im.consentRec[:0]
	im.release(im.held)
	im.held = 0
	return nil
}
