package backup

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"

	"google.golang.org/protobuf/proto"

	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	"github.com/contentbackup/contentbackup/internal/archive"
	"github.com/contentbackup/contentbackup/internal/fault"
	"github.com/contentbackup/contentbackup/internal/records"
	"github.com/contentbackup/contentbackup/internal/store"
)

// Errors of a chain that cannot be read as one snapshot.
var (
	// ErrChainOrder: a member's records are not in the order an export
	// writes them (groups by id, each followed by its messages by send
	// time and id, then consent by key), so the members cannot be merged.
	ErrChainOrder = fault.New(fault.FailedPrecondition, "a member of the chain is not in export order")
	// ErrChainMismatch: the members select differently, or are not in
	// the order of their snapshots.
	ErrChainMismatch = fault.New(fault.FailedPrecondition, "the backups do not form one chain")
)

// ChainMember is one backup of a chain as a restore reads it: its
// archive, opened, and the owner's change sequence its snapshot saw.
type ChainMember struct {
	Archive   *archive.Reader
	ChangeSeq int64
}

// tombstonePage is how many tombstones a chain reads at once.
const tombstonePage = 1000

// Chain reads a chain of backups (a full backup, then its increments,
// oldest first) as the one archive its newest member's snapshot is: a
// k-way merge of the members, each sorted as an export writes, in which
//   - the newest member holding a record gives its value (an increment
//     holds what changed since its base, as its snapshot saw it);
//   - a record is left out when a tombstone of the owner (store.Tombstones)
//     newer than the member that holds it says a write removed it: a
//     deleted message, a group that stopped being exportable and the
//     messages it held then;
//   - a message that had expired by the newest member's export time is
//     left out (ARCH-009), as that export left it out.
//
// So importing the chain into an empty owner gives exactly the newest
// member's snapshot, which importing its members one after another cannot
// (import keeps a stored group and message: ARCH-013, ARCH-014). It holds
// one element per member and one page of tombstones at a time.
type Chain struct {
	ctx     context.Context
	source  store.Tombstones
	owner   string
	members []*chainHead
	meta    *ds.BackupMetadataSave
	// Tombstones that matter lie above the oldest member's snapshot and
	// at or below the newest's; anyTombs says whether there are any.
	low, high int64
	anyTombs  bool

	inGroup   bool              // the messages of the current group are being merged
	groupTomb int64             // the current group's own tombstone (-1: none)
	page      []store.Tombstone // the current group's tombstones read
	tombAt    int
	tombAfter *store.TombstoneKey
	tombEnd   bool
	groupID   []byte

	records uint64
	counts  Counts
	err     error
}

// chainHead is one member's next element and where its order stands.
type chainHead struct {
	ar        *archive.Reader
	seq       int64
	el        *ds.BackupElement // nil at its end
	group     []byte            // the group its messages belong to
	lastMsg   *store.TombstoneKey
	consent   bool // its consent records have begun
	lastCons  *cs.ConsentSave
	lastGroup []byte
}

// NewChain opens members (oldest first, each's metadata not yet read) as
// one snapshot of owner, whose tombstones tombs reads. ctx bounds every
// read of the chain.
func NewChain(ctx context.Context, tombs store.Tombstones, owner string, members []ChainMember) (*Chain, error) {
	if len(members) == 0 {
		return nil, fmt.Errorf("chain: no members: %w", ErrChainMismatch)
	}
	c := &Chain{ctx: ctx, source: tombs, owner: owner, groupTomb: -1}
	for i, m := range members {
		meta, err := m.Archive.Metadata()
		if err != nil {
			return nil, fmt.Errorf("chain member %d: %w", i+1, err)
		}
		if i > 0 {
			prev := members[i-1]
			if m.ChangeSeq < prev.ChangeSeq || meta.GetExportedAtNs() < c.meta.GetExportedAtNs() {
				return nil, fmt.Errorf("chain member %d was taken before member %d: %w", i+1, i, ErrChainMismatch)
			}
			if !slices.Equal(meta.GetElements(), c.meta.GetElements()) || !proto.Equal(windowOf(meta), windowOf(c.meta)) {
				return nil, fmt.Errorf("chain member %d selects other records than member %d: %w", i+1, i, ErrChainMismatch)
			}
		}
		c.meta = meta
		c.members = append(c.members, &chainHead{ar: m.Archive, seq: m.ChangeSeq})
	}
	c.low, c.high = members[0].ChangeSeq, members[len(members)-1].ChangeSeq
	if len(members) > 1 {
		var err error
		if c.anyTombs, err = tombs.HasTombstones(ctx, owner, c.low, c.high); err != nil {
			return nil, err
		}
	}
	for _, h := range c.members {
		if err := h.advance(); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func windowOf(m *ds.BackupMetadataSave) *ds.ArchiveOptions {
	return &ds.ArchiveOptions{StartNs: m.StartNs, EndNs: m.EndNs}
}

// Metadata is the newest member's metadata: the snapshot's selection,
// window and export time.
func (c *Chain) Metadata() (*ds.BackupMetadataSave, error) { return c.meta, nil }

// Record is the number of the last element Next returned (the metadata
// is record 0).
func (c *Chain) Record() uint64 { return c.records }

// Stats counts the merged records handed out, the metadata included, and
// what the members' readers skipped or opened under the legacy retry.
func (c *Chain) Stats() archive.Stats {
	s := archive.Stats{Records: c.records + 1}
	for _, h := range c.members {
		ms := h.ar.Stats()
		s.Skipped += ms.Skipped
		s.Legacy += ms.Legacy
	}
	return s
}

// Counts is what Next has handed out, per element kind.
func (c *Chain) Counts() Counts { return c.counts }

// Close releases every member's reader.
func (c *Chain) Close() {
	for _, h := range c.members {
		h.ar.Close()
	}
}

// Next returns the snapshot's next element, or io.EOF after the last.
func (c *Chain) Next() (*ds.BackupElement, error) {
	if c.err != nil {
		return nil, c.err
	}
	el, err := c.next()
	if err != nil {
		c.err = err
		return nil, err
	}
	c.records++
	return el, nil
}

func (c *Chain) next() (*ds.BackupElement, error) {
	for {
		if c.inGroup {
			el, err := c.nextMessage()
			if el != nil || err != nil {
				return el, err
			}
			c.inGroup = false
		}
		var heads []*chainHead
		var id []byte
		for _, h := range c.members {
			g := h.el.GetGroup()
			switch {
			case h.el.GetGroupMessage() != nil:
				return nil, fmt.Errorf("chain: a message outside its group's records: %w", ErrChainOrder)
			case g == nil:
				continue
			case id == nil || bytes.Compare(g.GetId(), id) < 0:
				heads, id = []*chainHead{h}, g.GetId()
			case bytes.Equal(g.GetId(), id):
				heads = append(heads, h)
			}
		}
		if heads == nil {
			return c.nextConsent()
		}
		newest := heads[len(heads)-1]
		g := newest.el.GetGroup()
		for _, h := range heads {
			if err := h.advance(); err != nil {
				return nil, err
			}
		}
		if err := c.enterGroup(id); err != nil {
			return nil, err
		}
		c.inGroup = true
		if c.groupTomb > newest.seq {
			continue // no longer exportable when the newest member was taken
		}
		c.counts.Groups++
		return &ds.BackupElement{Element: &ds.BackupElement_Group{Group: g}}, nil
	}
}

// nextMessage returns the current group's next message the snapshot
// holds, or nil when its messages are done.
func (c *Chain) nextMessage() (*ds.BackupElement, error) {
	for {
		var heads []*chainHead
		var key store.TombstoneKey
		for _, h := range c.members {
			m := h.el.GetGroupMessage()
			if m == nil || !bytes.Equal(h.group, c.groupID) {
				continue
			}
			k := store.TombstoneKey{SentAtNs: m.GetSentAtNs(), ID: m.GetId()}
			switch d := compareKeys(k, key); {
			case heads == nil || d < 0:
				heads, key = []*chainHead{h}, k
			case d == 0:
				heads = append(heads, h)
			}
		}
		if heads == nil {
			return nil, nil
		}
		newest := heads[len(heads)-1]
		m := newest.el.GetGroupMessage()
		for _, h := range heads {
			if err := h.advance(); err != nil {
				return nil, err
			}
		}
		removed, err := c.tombstoneOf(key)
		if err != nil {
			return nil, err
		}
		switch {
		case c.groupTomb > newest.seq || removed > newest.seq:
			continue // deleted, or its group stopped being exportable, after
		case m.ExpiresAtNs != nil && m.GetExpiresAtNs() <= c.meta.GetExportedAtNs():
			continue // expired by the snapshot's export time (ARCH-009)
		}
		records.ExportForm(m)
		c.counts.Messages++
		return &ds.BackupElement{Element: &ds.BackupElement_GroupMessage{GroupMessage: m}}, nil
	}
}

func (c *Chain) nextConsent() (*ds.BackupElement, error) {
	var heads []*chainHead
	var key *cs.ConsentSave
	for _, h := range c.members {
		r := h.el.GetConsent()
		if r == nil {
			continue
		}
		switch d := compareConsent(r, key); {
		case heads == nil || d < 0:
			heads, key = []*chainHead{h}, r
		case d == 0:
			heads = append(heads, h)
		}
	}
	if heads == nil {
		for _, h := range c.members {
			if h.el != nil {
				return nil, fmt.Errorf("chain: a record after the consent records: %w", ErrChainOrder)
			}
		}
		return nil, io.EOF
	}
	r := heads[len(heads)-1].el.GetConsent()
	for _, h := range heads {
		if err := h.advance(); err != nil {
			return nil, err
		}
	}
	c.counts.Consent++
	return &ds.BackupElement{Element: &ds.BackupElement_Consent{Consent: r}}, nil
}

// enterGroup starts reading the tombstones of group id.
func (c *Chain) enterGroup(id []byte) error {
	c.groupID, c.groupTomb = id, -1
	c.page, c.tombAt, c.tombAfter, c.tombEnd = c.page[:0], 0, nil, !c.anyTombs
	t, err := c.tombstoneOf(store.TombstoneKey{SentAtNs: store.GroupTombstoneSentAt})
	if err != nil {
		return err
	}
	c.groupTomb = t
	return nil
}

// tombstoneOf returns the change that last removed the current group's
// record at key (-1: none). Keys are asked in increasing order.
func (c *Chain) tombstoneOf(key store.TombstoneKey) (int64, error) {
	for {
		for c.tombAt < len(c.page) {
			t := c.page[c.tombAt]
			switch d := compareKeys(t.Key, key); {
			case d < 0:
				c.tombAt++
			case d == 0:
				return t.ChangeSeq, nil
			default:
				return -1, nil
			}
		}
		if c.tombEnd {
			return -1, nil
		}
		page, err := c.readTombstones(c.tombAfter)
		if err != nil {
			return 0, err
		}
		c.page, c.tombAt = page, 0
		if len(page) < tombstonePage {
			c.tombEnd = true
		}
		if len(page) > 0 {
			last := page[len(page)-1].Key
			c.tombAfter = &last
		}
	}
}

func (c *Chain) readTombstones(after *store.TombstoneKey) ([]store.Tombstone, error) {
	page, err := c.source.GroupTombstones(c.ctx, c.owner, c.groupID, c.low, c.high, after, tombstonePage)
	if err != nil {
		return nil, fmt.Errorf("chain: tombstones of group %x: %w", c.groupID, err)
	}
	return page, nil
}

func compareKeys(a, b store.TombstoneKey) int {
	if d := cmp.Compare(a.SentAtNs, b.SentAtNs); d != 0 {
		return d
	}
	return bytes.Compare(a.ID, b.ID)
}

func compareConsent(a, b *cs.ConsentSave) int {
	if d := cmp.Compare(a.GetEntityType(), b.GetEntityType()); d != 0 {
		return d
	}
	return cmp.Compare(a.GetEntity(), b.GetEntity())
}

// advance reads the member's next group, message or consent record,
// checking it comes in export order.
func (h *chainHead) advance() error {
	for {
		el, err := h.ar.Next()
		if errors.Is(err, io.EOF) {
			h.el = nil
			return nil
		}
		if err != nil {
			return err
		}
		switch e := el.GetElement().(type) {
		case *ds.BackupElement_Group:
			id := e.Group.GetId()
			if h.consent || (h.lastGroup != nil && bytes.Compare(id, h.lastGroup) <= 0) {
				return fmt.Errorf("chain: group %x after group %x: %w", id, h.lastGroup, ErrChainOrder)
			}
			h.lastGroup, h.group, h.lastMsg = id, id, nil
		case *ds.BackupElement_GroupMessage:
			m := e.GroupMessage
			k := store.TombstoneKey{SentAtNs: m.GetSentAtNs(), ID: m.GetId()}
			if h.consent || !bytes.Equal(m.GetGroupId(), h.group) || (h.lastMsg != nil && compareKeys(k, *h.lastMsg) <= 0) {
				return fmt.Errorf("chain: message %x out of its group's order: %w", m.GetId(), ErrChainOrder)
			}
			h.lastMsg = &k
		case *ds.BackupElement_Consent:
			if h.lastCons != nil && compareConsent(e.Consent, h.lastCons) <= 0 {
				return fmt.Errorf("chain: consent record out of order: %w", ErrChainOrder)
			}
			h.consent, h.lastCons, h.group = true, e.Consent, nil
		default:
			continue // a later metadata element: nothing to merge
		}
		h.el = el
		return nil
	}
}

// Synthesize writes the chain's snapshot to w under key as one archive: a
// synthetic full backup, which an importer that can only add (the
// reference client) restores to exactly that snapshot.
func Synthesize(c *Chain, w io.Writer, key []byte, written *atomic.Uint64) (Counts, error) {
	aw, err := archive.NewWriter(w, key)
	if err != nil {
		return Counts{}, err
	}
	meta, _ := c.Metadata()
	if err := aw.WriteElement(&ds.BackupElement{Element: &ds.BackupElement_Metadata{Metadata: meta}}); err != nil {
		return Counts{}, err
	}
	for {
		el, err := c.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err == nil {
			err = aw.WriteElement(el)
		}
		if err != nil {
			return c.Counts(), fmt.Errorf("synthesize: %w", err)
		}
		if written != nil {
			written.Add(1)
		}
	}
	if err := aw.Close(); err != nil {
		return c.Counts(), fmt.Errorf("synthesize: %w", err)
	}
	return c.Counts(), nil
}
