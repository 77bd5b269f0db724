// Package backuptest drives random histories of an owner's records
// against a store and keeps, beside it, a model of what the owner's
// exportable state is at any time, written from the archive spec's rules
// rather than from the code under test: the restore tests compare what a
// restore gives back with the model's snapshot at the backup's time.
package backuptest

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

const (
	allowed  = gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_ALLOWED
	restored = gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_RESTORED
	oneShot  = gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_ONESHOT
	group    = gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_GROUP
)

// History is one owner's random history: Step applies an operation to the
// store and to the model alike.
type History struct {
	rng   *rand.Rand
	st    store.Store
	Owner string
	// Clock is the history's time (ns): one second per step, starting an
	// hour after the wall clock, so that what expires in the history has
	// not expired by the wall clock an import reads it at.
	Clock int64
	// Ops counts the operations applied, by name.
	Ops map[string]int
	// NoPurge leaves the purge out: for a caller whose exports run at
	// the wall clock's time rather than Clock's, where a message purged
	// at Clock has not expired by the next export's time, which can never
	// happen for real (the purge runs at the time exports do).
	NoPurge bool
	// Shapes, when set, make the history's records: a caller whose
	// records another importer must take (the reference client) gives
	// its own. Nil: storetest's fixtures.
	Shapes *Shapes

	groups  map[string]*gb.GroupSave
	msgs    map[string]*mb.GroupMessageSave
	consent map[string]*cs.ConsentSave
	deleted []*mb.GroupMessageSave
	next    int
}

// NewHistory starts an empty history of owner in st.
func NewHistory(st store.Store, owner string, seed uint64) *History {
	return &History{rng: rand.New(rand.NewPCG(seed, 45)), st: st, Owner: owner, Clock: time.Now().Add(time.Hour).UnixNano(),
		Ops: map[string]int{}, groups: map[string]*gb.GroupSave{}, msgs: map[string]*mb.GroupMessageSave{}, consent: map[string]*cs.ConsentSave{}}
}

func (h *History) id(prefix string) string {
	h.next++
	return fmt.Sprintf("%s%d", prefix, h.next)
}

// pick returns a random element of the keys of m for which ok holds, in a
// seeded order ("" when none does).
func pick[V any](rng *rand.Rand, m map[string]V, ok func(V) bool) string {
	keys := slices.Sorted(maps.Keys(m))
	keys = slices.DeleteFunc(keys, func(k string) bool { return !ok(m[k]) })
	if len(keys) == 0 {
		return ""
	}
	return keys[rng.IntN(len(keys))]
}

func live(g *gb.GroupSave) bool { return g.GetMembershipState() != restored }

// Step applies one random operation, advancing the clock a second.
func (h *History) Step(t testing.TB) {
	t.Helper()
	h.Clock += int64(time.Second)
	ctx := t.Context()
	r := h.rng.IntN(100)
	switch {
	case r < 8 || len(h.groups) == 0:
		g := h.newGroup(h.id("g"))
		if h.rng.IntN(6) == 0 {
			g.ConversationType = oneShot
		}
		h.put(t, g, "new group")
	case r < 22:
		id := pick(h.rng, h.groups, live)
		if id == "" {
			return
		}
		g := proto.Clone(h.groups[id]).(*gb.GroupSave)
		attrs := g.MutableMetadata.Attributes
		switch h.rng.IntN(6) {
		case 0:
			attrs["group_name"] = h.id("name-")
		case 1:
			attrs["description"] = h.id("about-")
		case 2:
			attrs["group_image_url_square"] = "https://example.com/" + h.id("img")
		case 3:
			g.MutableMetadata.AdminList = append(g.MutableMetadata.AdminList, h.id("admin-"))
		case 4:
			// The two settings go together (records.CheckArchivedGroup).
			g.MessageDisappearFromNs = proto.Int64(1_700_000_000_000_000_000 + int64(h.rng.IntN(100)))
			g.MessageDisappearInNs = proto.Int64(int64(h.rng.IntN(100)+1) * int64(time.Second))
		case 5:
			attrs["app_data"] = h.id("app-")
		}
		switch {
		case g.ConversationType == oneShot && h.rng.IntN(2) == 0:
			g.ConversationType = group // a one-shot conversation becomes a group
		case g.ConversationType == group && h.rng.IntN(10) == 0:
			g.ConversationType = oneShot
		}
		h.put(t, g, "update group")
	case r < 50:
		id := pick(h.rng, h.groups, live)
		if id == "" {
			return
		}
		var batch []*mb.GroupMessageSave
		for range h.rng.IntN(4) + 1 {
			batch = append(batch, h.newMessage(h.id("m"), []byte(id)))
		}
		// Late imports: history arriving for a live conversation.
		late := h.rng.IntN(8) == 0
		h.append(t, batch, late, map[bool]string{false: "append", true: "late import"}[late])
	case r < 60:
		id := pick(h.rng, h.msgs, func(m *mb.GroupMessageSave) bool { return live(h.groups[string(m.GroupId)]) })
		if id == "" {
			return
		}
		m := h.msgs[id]
		err := h.st.DeleteMessage(ctx, h.Owner, m.GroupId, m.Id, func(*mb.GroupMessageSave, *gb.GroupSave) error { return nil })
		if err != nil {
			t.Fatalf("delete %s: %v", id, err)
		}
		delete(h.msgs, id)
		h.deleted = append(h.deleted, m)
		h.Ops["delete"]++
	case r < 64:
		if len(h.deleted) == 0 {
			return
		}
		old := h.deleted[h.rng.IntN(len(h.deleted))]
		if _, stored := h.msgs[string(old.Id)]; stored {
			return
		}
		gid := pick(h.rng, h.groups, live)
		if gid == "" {
			return
		}
		m := h.newMessage(string(old.Id), []byte(gid))
		m.Id = old.Id // the same id whatever the shapes make of it
		h.append(t, []*mb.GroupMessageSave{m}, false, "id reused after delete")
	case r < 78:
		entity := fmt.Sprintf("inbox-%d", h.rng.IntN(8))
		if h.Shapes != nil {
			entity = h.Shapes.Entity(h.rng.IntN(8))
		}
		c := storetest.Consent(entity, cs.ConsentStateSave(h.rng.IntN(3)+1), time.Now().UnixNano()-int64(h.rng.IntN(1000))*int64(time.Second))
		if _, err := h.st.MergeConsent(ctx, h.Owner, []*cs.ConsentSave{c}); err != nil {
			t.Fatal(err)
		}
		// NOTES.md's rule: the greater consented_at_ns wins; a tie keeps
		// the stored record.
		key := consentKey(c)
		if old, ok := h.consent[key]; !ok || c.ConsentedAtNs > old.ConsentedAtNs {
			h.consent[key] = c
		}
		h.Ops["consent"]++
	case r < 84:
		// A conversation imported from an archive: Restored, with history.
		g := h.newGroup(h.id("imp"))
		if _, err := h.st.MergeGroups(ctx, h.Owner, []*gb.GroupSave{g}); err != nil {
			t.Fatal(err)
		}
		g.MembershipState = restored
		h.groups[string(g.Id)] = g
		var batch []*mb.GroupMessageSave
		for range h.rng.IntN(3) + 1 {
			batch = append(batch, h.newMessage(h.id("im"), g.Id))
		}
		h.append(t, batch, true, "import conversation")
	case r < 90:
		id := pick(h.rng, h.groups, func(g *gb.GroupSave) bool { return !live(g) })
		if id == "" {
			return
		}
		if _, _, err := h.st.ActivateGroup(ctx, h.Owner, []byte(id)); err != nil {
			t.Fatal(err)
		}
		h.groups[id].MembershipState = allowed
		h.Ops["activate"]++
	default:
		if h.NoPurge {
			return
		}
		if _, _, err := h.st.PurgeExpired(ctx, time.Unix(0, h.Clock), "", 1000, 100000); err != nil {
			t.Fatal(err)
		}
		for id, m := range h.msgs {
			if m.ExpiresAtNs != nil && *m.ExpiresAtNs <= h.Clock {
				delete(h.msgs, id)
			}
		}
		h.Ops["purge"]++
	}
}

// Shapes make a history's records.
type Shapes struct {
	// Group is a new group named name (its name also its group_name).
	Group func(name string) *gb.GroupSave
	// Message is a new application message of group gid.
	Message func(id string, gid []byte, sentAtNs int64) *mb.GroupMessageSave
	// Entity is the i-th consent entity (of 8), an inbox id.
	Entity func(i int) string
}

func (h *History) newGroup(name string) *gb.GroupSave {
	if h.Shapes != nil {
		g := h.Shapes.Group(name)
		if g.MutableMetadata == nil {
			g.MutableMetadata = &gb.MutableMetadataSave{}
		}
		if g.MutableMetadata.Attributes == nil {
			g.MutableMetadata.Attributes = map[string]string{}
		}
		g.MutableMetadata.Attributes["group_name"] = name
		return g
	}
	g := storetest.FullGroup(name)
	g.Id = storetest.GroupID(name)
	g.DmId = nil
	g.MutableMetadata.Attributes["group_name"] = name
	return g
}

func (h *History) newMessage(id string, gid []byte) *mb.GroupMessageSave {
	sentAt := int64(h.rng.IntN(1000)) * int64(time.Second)
	m := storetest.Message(id, gid, sentAt)
	if h.Shapes != nil {
		m = h.Shapes.Message(id, gid, sentAt)
	}
	switch h.rng.IntN(10) {
	case 0, 1:
		// Disappearing: some expire within the history, some after it.
		m.ExpiresAtNs = proto.Int64(h.Clock + int64(h.rng.IntN(60)+1)*int64(time.Second))
		m.ExpiryKnown = proto.Bool(true)
	case 2:
		m.Kind = mb.GroupMessageKindSave_GROUP_MESSAGE_KIND_SAVE_MEMBERSHIP_CHANGE
	}
	return m
}

func (h *History) put(t testing.TB, g *gb.GroupSave, op string) {
	t.Helper()
	if _, err := h.st.PutGroup(t.Context(), h.Owner, g); err != nil {
		t.Fatalf("%s %x: %v", op, g.Id, err)
	}
	h.groups[string(g.Id)] = proto.Clone(g).(*gb.GroupSave)
	h.Ops[op]++
}

func (h *History) append(t testing.TB, batch []*mb.GroupMessageSave, imported bool, op string) {
	t.Helper()
	if _, err := h.st.AppendMessages(t.Context(), h.Owner, batch, store.AppendOptions{AllowRestored: imported}); err != nil {
		t.Fatalf("%s: %v", op, err)
	}
	for _, m := range batch {
		h.msgs[string(m.Id)] = proto.Clone(m).(*mb.GroupMessageSave)
	}
	h.Ops[op]++
}

func consentKey(c *cs.ConsentSave) string {
	return fmt.Sprintf("%d\x00%s", c.EntityType, c.Entity)
}

// Entities are the consent entities a history may name.
func (h *History) Entities() []string {
	out := make([]string, 8)
	for i := range out {
		out[i] = fmt.Sprintf("inbox-%d", i)
		if h.Shapes != nil {
			out[i] = h.Shapes.Entity(i)
		}
	}
	return out
}

// Snapshot is the owner's exportable state at exportedAtNs, as an export
// with the default options writes it (ARCH-007, ARCH-009, ARCH-010,
// ARCH-026): every group that is neither a sync nor a one-shot
// conversation nor Restored, in id order, each followed by its
// application messages that have not expired by then, in send order; then
// every consent record, by type and entity.
func (h *History) Snapshot(exportedAtNs int64) []*ds.BackupElement {
	var out []*ds.BackupElement
	groups := slices.SortedFunc(maps.Values(h.groups), func(a, b *gb.GroupSave) int { return bytes.Compare(a.Id, b.Id) })
	for _, g := range groups {
		if g.ConversationType == oneShot || g.ConversationType == gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_SYNC || g.MembershipState == restored {
			continue
		}
		out = append(out, &ds.BackupElement{Element: &ds.BackupElement_Group{Group: proto.Clone(g).(*gb.GroupSave)}})
		var msgs []*mb.GroupMessageSave
		for _, m := range h.msgs {
			if bytes.Equal(m.GroupId, g.Id) && m.Kind == mb.GroupMessageKindSave_GROUP_MESSAGE_KIND_SAVE_APPLICATION &&
				(m.ExpiresAtNs == nil || *m.ExpiresAtNs > exportedAtNs) {
				msgs = append(msgs, m)
			}
		}
		slices.SortFunc(msgs, func(a, b *mb.GroupMessageSave) int {
			return cmp.Or(cmp.Compare(a.SentAtNs, b.SentAtNs), bytes.Compare(a.Id, b.Id))
		})
		for _, m := range msgs {
			out = append(out, &ds.BackupElement{Element: &ds.BackupElement_GroupMessage{GroupMessage: proto.Clone(m).(*mb.GroupMessageSave)}})
		}
	}
	consent := slices.SortedFunc(maps.Values(h.consent), func(a, b *cs.ConsentSave) int {
		return cmp.Or(cmp.Compare(a.EntityType, b.EntityType), cmp.Compare(a.Entity, b.Entity))
	})
	for _, c := range consent {
		out = append(out, &ds.BackupElement{Element: &ds.BackupElement_Consent{Consent: proto.Clone(c).(*cs.ConsentSave)}})
	}
	return out
}

// Restored is snapshot as an import into an empty owner stores it: every
// group Restored (ARCH-015, ARCH-020), everything else as archived.
func Restored(snapshot []*ds.BackupElement) []*ds.BackupElement {
	out := make([]*ds.BackupElement, len(snapshot))
	for i, el := range snapshot {
		if g := el.GetGroup(); g != nil {
			g = proto.Clone(g).(*gb.GroupSave)
			g.MembershipState = restored
			el = &ds.BackupElement{Element: &ds.BackupElement_Group{Group: g}}
		}
		out[i] = el
	}
	return out
}

// Stored reads every group of owner (Restored ones included) in id order,
// each followed by every message stored for it in send order, then every
// consent record: what an import into an empty owner left.
func Stored(t testing.TB, st store.Store, owner string) []*ds.BackupElement {
	t.Helper()
	ctx := t.Context()
	var out []*ds.BackupElement
	err := st.Snapshot(ctx, owner, func(snap store.Snapshot) error {
		var groups []*gb.GroupSave
		if err := snap.EachGroup(ctx, func(g *gb.GroupSave) error { groups = append(groups, g); return nil }); err != nil {
			return err
		}
		for _, g := range groups {
			out = append(out, &ds.BackupElement{Element: &ds.BackupElement_Group{Group: g}})
			err := snap.EachMessage(ctx, store.MessageQuery{GroupID: g.Id}, func(m *mb.GroupMessageSave) error {
				out = append(out, &ds.BackupElement{Element: &ds.BackupElement_GroupMessage{GroupMessage: m}})
				return nil
			})
			if err != nil {
				return err
			}
		}
		return snap.EachConsent(ctx, func(c *cs.ConsentSave) error {
			out = append(out, &ds.BackupElement{Element: &ds.BackupElement_Consent{Consent: c}})
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Diff lists the records where got and want differ, by kind and id, at
// most limit of them: empty when they are equal.
func Diff(got, want []*ds.BackupElement, limit int) []string {
	key := func(el *ds.BackupElement) string {
		switch e := el.Element.(type) {
		case *ds.BackupElement_Group:
			return fmt.Sprintf("group %q", e.Group.Id)
		case *ds.BackupElement_GroupMessage:
			return fmt.Sprintf("message %q", e.GroupMessage.Id)
		case *ds.BackupElement_Consent:
			return "consent " + consentKey(e.Consent)
		}
		return "other"
	}
	var out []string
	index := func(els []*ds.BackupElement, what string) map[string]*ds.BackupElement {
		m := map[string]*ds.BackupElement{}
		for _, el := range els {
			k := key(el)
			if _, dup := m[k]; dup {
				out = append(out, fmt.Sprintf("%s: twice in %s", k, what))
			}
			m[k] = el
		}
		return m
	}
	g, w := index(got, "what was read"), index(want, "the snapshot")
	for _, k := range slices.Sorted(maps.Keys(w)) {
		switch gv, ok := g[k]; {
		case !ok:
			out = append(out, k+": missing")
		case !proto.Equal(gv, w[k]):
			out = append(out, fmt.Sprintf("%s: got %v, want %v", k, gv, w[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(g)) {
		if _, ok := w[k]; !ok {
			out = append(out, k+": not in the snapshot")
		}
	}
	if len(out) == 0 && len(got) == len(want) {
		for i := range got {
			if key(got[i]) != key(want[i]) {
				out = append(out, fmt.Sprintf("record %d is %s, want %s (order)", i, key(got[i]), key(want[i])))
				break
			}
		}
	}
	if len(out) > limit {
		out = append(out[:limit], fmt.Sprintf("... %d more", len(out)-limit))
	}
	return out
}
