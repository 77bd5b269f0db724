package backup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/fault"
	"github.com/contentbackup/contentbackup/internal/records"
	"github.com/contentbackup/contentbackup/internal/store"
)

// ReplaceResult is what a restore in replace mode changed.
type ReplaceResult struct {
	// Written: records stored as the snapshot holds them (new, or
	// different from what was stored); Deleted: records the snapshot
	// lacks, removed. Unchanged: stored as the snapshot holds them.
	Written, Deleted, Unchanged KindCounts
	// Expired: messages of the snapshot that had expired by the restore,
	// not stored (the purge would delete them).
	Expired uint64
	// Conflicts: messages of the snapshot whose id the owner holds in a
	// record the replace does not rewrite (a message of a conversation
	// that is not exportable, or outside the selection): left as stored.
	Conflicts uint64
	// Records read, the metadata included.
	Records uint64
}

// KindCounts counts records by kind.
type KindCounts struct {
	Groups, Messages, Consent uint64
}

// ErrTooManyConflicts: more messages than a replace keeps in memory wait
// for their id to be freed by a later group.
var ErrTooManyConflicts = fault.New(fault.Exhausted, "too many messages of the snapshot share an id with another stored message")

// replace batch bounds.
const (
	replaceBatch      = 1000
	replaceBatchBytes = 4 << 20
	// replaceRetryBytes bounds the messages kept to append again once a
	// later group of the snapshot has freed their id.
	replaceRetryBytes = 16 << 20
)

// Replace rewrites owner's records to the snapshot src holds (a restore
// in replace mode, point in time): afterwards every exportable record of
// the owner within opts' selection is the snapshot's, at its value:
//   - a group of the snapshot is stored with every field as archived, its
//     membership state included; an exportable group the snapshot lacks is
//     deleted with its messages;
//   - a selected message of a snapshot group (an application message in
//     the window, with no expiry when disappearing ones are excluded)
//     that the snapshot lacks is deleted, and the snapshot's are stored
//     (one stored under its id with other fields is replaced);
//   - consent records are set as the snapshot holds them, and those it
//     lacks deleted, when consent is selected.
//
// What is not exportable (Restored, sync and one-shot conversations
// absent from the snapshot, other kinds of message) is left. Every write
// is a change of the owner, so later backups see it. Like import, it
// streams: it holds a page of the owner's records and a batch of the
// snapshot's at a time.
func Replace(ctx context.Context, st store.Store, owner string, src Source, opts *ds.ArchiveOptions, progress *atomic.Uint64) (ReplaceResult, error) {
	opts, err := Resolve(opts)
	if err != nil {
		return ReplaceResult{}, err
	}
	if _, err := src.Metadata(); err != nil {
		return ReplaceResult{}, err
	}
	r := &replacer{ctx: ctx, st: st, owner: owner, opts: opts, nowNs: time.Now().UnixNano(),
		messages: slices.Contains(opts.Elements, selMessages), consent: slices.Contains(opts.Elements, selConsent)}
	r.groups = newPager(func(after []byte) ([]*gb.GroupSave, error) {
		return st.ListGroups(ctx, owner, after, store.SnapshotPageSize)
	},
		func(g *gb.GroupSave) []byte { return g.GetId() })
	r.stored = newPager(func(after *store.ConsentKey) ([]*cs.ConsentSave, error) {
		return st.ListConsent(ctx, owner, after, store.SnapshotPageSize)
	}, func(c *cs.ConsentSave) *store.ConsentKey {
		return &store.ConsentKey{EntityType: c.GetEntityType(), Entity: c.GetEntity()}
	})
	r.res.Records = 1
	for {
		el, err := src.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err == nil {
			r.res.Records++
			err = r.apply(el)
		}
		if err != nil {
			return r.res, fmt.Errorf("replace: %w", err)
		}
		if progress != nil {
			progress.Add(1)
		}
	}
	if err := r.endGroups(); err != nil {
		return r.res, fmt.Errorf("replace: %w", err)
	}
	if err := r.endConsent(nil); err != nil {
		return r.res, fmt.Errorf("replace: %w", err)
	}
	if err := r.retryConflicts(); err != nil {
		return r.res, fmt.Errorf("replace: %w", err)
	}
	return r.res, nil
}

type replacer struct {
	ctx               context.Context
	st                store.Store
	owner             string
	opts              *ds.ArchiveOptions
	nowNs             int64
	messages, consent bool
	res               ReplaceResult

	groups     *pager[*gb.GroupSave, []byte]
	stored     *pager[*cs.ConsentSave, *store.ConsentKey]
	groupsDone bool
	group      []byte                                             // the snapshot group whose messages come
	msgs       *pager[*mb.GroupMessageSave, *store.MessageCursor] // its stored messages
	batch      []*mb.GroupMessageSave
	batchBytes int
	retry      []*mb.GroupMessageSave
	retryBytes int
}

func (r *replacer) apply(el *ds.BackupElement) error {
	switch e := el.GetElement().(type) {
	case *ds.BackupElement_Group:
		return r.replaceGroup(e.Group)
	case *ds.BackupElement_GroupMessage:
		return r.replaceMessage(e.GroupMessage)
	case *ds.BackupElement_Consent:
		if err := r.endGroups(); err != nil {
			return err
		}
		return r.endConsent(e.Consent)
	}
	return nil
}

// replaceGroup ends the previous group, deletes the exportable stored
// groups before g, and stores g as archived.
func (r *replacer) replaceGroup(g *gb.GroupSave) error {
	if err := records.CheckArchivedGroup(g); err != nil {
		return records.At("group", err)
	}
	if err := r.endGroup(); err != nil {
		return err
	}
	stored, err := r.groups.until(g.GetId(), bytes.Compare, r.dropGroup)
	if err != nil {
		return err
	}
	switch {
	case stored != nil && proto.Equal(stored, g):
		r.res.Unchanged.Groups++
	default:
		if err := r.st.ReplaceGroup(r.ctx, r.owner, g); err != nil {
			return err
		}
		r.res.Written.Groups++
	}
	r.group = g.GetId()
	q := store.MessageQuery{GroupID: g.GetId(), Limit: store.SnapshotPageSize}
	r.msgs = newPager(func(after *store.MessageCursor) ([]*mb.GroupMessageSave, error) {
		q.After = after
		page, err := r.st.ListMessages(r.ctx, r.owner, q)
		return page.Messages, err
	}, func(m *mb.GroupMessageSave) *store.MessageCursor {
		return &store.MessageCursor{SentAtNs: m.GetSentAtNs(), ID: m.GetId()}
	})
	return nil
}

// dropGroup deletes a stored group the snapshot lacks, when exportable.
func (r *replacer) dropGroup(g *gb.GroupSave) error {
	if !r.messages || !records.GroupExportable(g) {
		return nil
	}
	if err := r.st.DeleteGroup(r.ctx, r.owner, g.GetId()); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	r.res.Deleted.Groups++
	return nil
}

func (r *replacer) replaceMessage(m *mb.GroupMessageSave) error {
	if err := records.PrepareMessage(m); err != nil {
		return records.At("group_message", err)
	}
	if r.group == nil || string(m.GetGroupId()) != string(r.group) {
		return fmt.Errorf("message %x names group %x: %w", m.GetId(), m.GetGroupId(), ErrMissingGroup)
	}
	key := &store.MessageCursor{SentAtNs: m.GetSentAtNs(), ID: m.GetId()}
	stored, err := r.msgs.until(key, compareCursor, r.dropMessage)
	if err != nil {
		return err
	}
	if stored != nil {
		records.ExportForm(stored)
		if proto.Equal(stored, m) {
			r.res.Unchanged.Messages++
			return nil
		}
		// The same id and time, other content: an id reused.
		if err := r.deleteMessage(stored); err != nil {
			return err
		}
	}
	if m.ExpiresAtNs != nil && m.GetExpiresAtNs() <= r.nowNs {
		r.res.Expired++
		return nil
	}
	r.batch = append(r.batch, m)
	r.batchBytes += len(m.GetDecryptedMessageBytes())
	if len(r.batch) >= replaceBatch || r.batchBytes >= replaceBatchBytes {
		return r.flush()
	}
	return nil
}

// selected reports whether a stored message is one the snapshot's
// selection would hold, so that its absence there says to delete it.
func (r *replacer) selected(m *mb.GroupMessageSave) bool {
	if m.GetKind() != mb.GroupMessageKindSave_GROUP_MESSAGE_KIND_SAVE_APPLICATION {
		return false
	}
	if r.opts.StartNs != nil && m.GetSentAtNs() <= r.opts.GetStartNs() || r.opts.EndNs != nil && m.GetSentAtNs() > r.opts.GetEndNs() {
		return false
	}
	return !r.opts.GetExcludeDisappearingMessages() || m.ExpiresAtNs == nil
}

func (r *replacer) dropMessage(m *mb.GroupMessageSave) error {
	if !r.selected(m) {
		return nil
	}
	return r.deleteMessage(m)
}

func (r *replacer) deleteMessage(m *mb.GroupMessageSave) error {
	err := r.st.DeleteMessage(r.ctx, r.owner, m.GetGroupId(), m.GetId(), func(*mb.GroupMessageSave, *gb.GroupSave) error { return nil })
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	r.res.Deleted.Messages++
	return nil
}

// flush stores the batch; a message whose id the owner holds elsewhere
// waits for the rest of the snapshot, which may free it.
func (r *replacer) flush() error {
	if len(r.batch) == 0 {
		return nil
	}
	out, err := r.st.AppendMessages(r.ctx, r.owner, r.batch, store.AppendOptions{AllowRestored: true})
	if err != nil {
		return err
	}
	for i, o := range out {
		if o == store.Inserted {
			r.res.Written.Messages++
			continue
		}
		m := r.batch[i]
		r.retryBytes += len(m.GetDecryptedMessageBytes()) + len(m.GetId())
		if r.retryBytes > replaceRetryBytes {
			return fmt.Errorf("%d bytes of them: %w", r.retryBytes, ErrTooManyConflicts)
		}
		r.retry = append(r.retry, m)
	}
	r.batch, r.batchBytes = r.batch[:0], 0
	return nil
}

// endGroup deletes the current group's stored messages after the
// snapshot's last, and stores what is batched.
func (r *replacer) endGroup() error {
	if r.msgs != nil {
		if err := r.msgs.rest(r.dropMessage); err != nil {
			return err
		}
		r.msgs = nil
	}
	return r.flush()
}

// endGroups ends the snapshot's groups: the exportable stored groups
// after its last are deleted.
func (r *replacer) endGroups() error {
	if r.groupsDone {
		return nil
	}
	r.groupsDone = true
	if err := r.endGroup(); err != nil {
		return err
	}
	return r.groups.rest(r.dropGroup)
}

// endConsent sets c (nil: none is left) after deleting the stored records
// before it.
func (r *replacer) endConsent(c *cs.ConsentSave) error {
	drop := func(s *cs.ConsentSave) error {
		if !r.consent {
			return nil
		}
		r.res.Deleted.Consent++
		return r.st.DeleteConsent(r.ctx, r.owner, []store.ConsentKey{{EntityType: s.GetEntityType(), Entity: s.GetEntity()}})
	}
	if c == nil {
		return r.stored.rest(drop)
	}
	if err := errors.Join(records.CheckConsent(c), records.CheckConsentTime(c, time.Now())); err != nil {
		return records.At("consent", err)
	}
	stored, err := r.stored.until(&store.ConsentKey{EntityType: c.GetEntityType(), Entity: c.GetEntity()}, compareConsentKey, drop)
	if err != nil {
		return err
	}
	if stored != nil && proto.Equal(stored, c) {
		r.res.Unchanged.Consent++
		return nil
	}
	r.res.Written.Consent++
	return r.st.ReplaceConsent(r.ctx, r.owner, []*cs.ConsentSave{c})
}

// retryConflicts stores the messages whose id was held elsewhere when
// their group came. A later group may have freed it; a record the replace
// does not otherwise rewrite (a message of another kind, or of a
// conversation that is not exportable) written under the id after the
// snapshot gives way: the snapshot's message is what the owner held.
func (r *replacer) retryConflicts() error {
	for _, m := range r.retry {
		if _, err := r.st.DeleteMessageByID(r.ctx, r.owner, m.GetId()); err != nil {
			return err
		}
	}
	for chunk := range slices.Chunk(r.retry, replaceBatch) {
		out, err := r.st.AppendMessages(r.ctx, r.owner, chunk, store.AppendOptions{AllowRestored: true})
		if err != nil {
			return err
		}
		for _, o := range out {
			if o == store.Inserted {
				r.res.Written.Messages++
			} else {
				r.res.Conflicts++
			}
		}
	}
	r.retry = nil
	return nil
}

func compareCursor(a, b *store.MessageCursor) int {
	return compareKeys(store.TombstoneKey{SentAtNs: a.SentAtNs, ID: a.ID}, store.TombstoneKey{SentAtNs: b.SentAtNs, ID: b.ID})
}

func compareConsentKey(a, b *store.ConsentKey) int {
	return compareConsent(&cs.ConsentSave{EntityType: a.EntityType, Entity: a.Entity}, &cs.ConsentSave{EntityType: b.EntityType, Entity: b.Entity})
}

// pager walks stored records in key order, a page at a time, beside the
// snapshot's records in the same order.
type pager[T any, K any] struct {
	read  func(after K) ([]T, error)
	keyOf func(T) K
	page  []T
	at    int
	after K
	done  bool
}

func newPager[T any, K any](read func(after K) ([]T, error), keyOf func(T) K) *pager[T, K] {
	return &pager[T, K]{read: read, keyOf: keyOf}
}

// peek returns the next stored record, or false at the end.
func (p *pager[T, K]) peek() (T, bool, error) {
	for p.at >= len(p.page) {
		var zero T
		if p.done {
			return zero, false, nil
		}
		page, err := p.read(p.after)
		if err != nil {
			return zero, false, err
		}
		p.page, p.at = page, 0
		if len(page) < store.SnapshotPageSize {
			p.done = true
		}
		if len(page) > 0 {
			p.after = p.keyOf(page[len(page)-1])
		}
	}
	return p.page[p.at], true, nil
}

// until hands every stored record before key to before, and returns the
// stored record at key (consumed), or the zero value when there is none.
func (p *pager[T, K]) until(key K, compare func(a, b K) int, before func(T) error) (T, error) {
	var zero T
	for {
		rec, ok, err := p.peek()
		if err != nil || !ok {
			return zero, err
		}
		switch d := compare(p.keyOf(rec), key); {
		case d < 0:
			p.at++
			if err := before(rec); err != nil {
				return zero, err
			}
		case d == 0:
			p.at++
			return rec, nil
		default:
			return zero, nil
		}
	}
}

// rest hands every stored record left to fn.
func (p *pager[T, K]) rest(fn func(T) error) error {
	for {
		rec, ok, err := p.peek()
		if err != nil || !ok {
			return err
		}
		p.at++
		if err := fn(rec); err != nil {
			return err
		}
	}
}
