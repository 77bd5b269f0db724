//lint:file-ignore SA1019 content_type_save is retired but still stored, and made to agree with the envelope on export (ARCH-004, ARCH-008).
package backup

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	"github.com/contentbackup/contentbackup/internal/archive"
	"github.com/contentbackup/contentbackup/internal/archive/archivetest"
	"github.com/contentbackup/contentbackup/internal/budget"
	"github.com/contentbackup/contentbackup/internal/eventually"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

var key = bytes.Repeat([]byte{7}, 32)

const exportAt = int64(2_000_000_000_000_000_000)

func ptr[T any](v T) *T { return &v }

func forEachEngine(t *testing.T, fn func(t *testing.T, s store.Store)) {
	for _, e := range enginetest.Engines() {
		t.Run(e.Name, func(t *testing.T) { fn(t, e.Open(t)) })
	}
}

func diff(t *testing.T, what string, got, want any) {
	t.Helper()
	if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
		t.Errorf("%s (-want +got):\n%s", what, d)
	}
}

func envelope(t *testing.T, authority, typ string, major uint32) []byte {
	b, err := proto.Marshal(&mc.EncodedContent{Type: &mc.ContentTypeId{AuthorityId: authority, TypeId: typ, VersionMajor: major}, Content: storetest.GroupID("x")})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fixture fills owner's store: what an export must include and exclude.
type fixture struct {
	eligibleGroups []*gb.GroupSave
	included       []*mb.GroupMessageSave // in export order
	consent        []*cs.ConsentSave
}

func fill(t *testing.T, s store.Store, owner string) fixture {
	ctx := t.Context()
	var f fixture
	group := storetest.FullGroup("g-group")
	dm := storetest.FullGroup("g-dm")
	dm.ConversationType = gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_DM
	quiet := storetest.MinimalGroup("g-quiet") // no messages at all
	quiet.CreatedAtNs = 1                      // long before any window
	sync := storetest.MinimalGroup("g-sync")
	sync.ConversationType = gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_SYNC
	oneshot := storetest.MinimalGroup("g-oneshot")
	oneshot.ConversationType = gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_ONESHOT
	for _, g := range []*gb.GroupSave{group, dm, quiet, sync, oneshot} {
		if _, err := s.PutGroup(ctx, owner, g); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.MergeGroups(ctx, owner, []*gb.GroupSave{storetest.FullGroup("g-restored")}); err != nil {
		t.Fatal(err)
	}
	f.eligibleGroups = []*gb.GroupSave{dm, group, quiet}

	msg := func(id string, g *gb.GroupSave, sent int64, content []byte) *mb.GroupMessageSave {
		m := storetest.FullMessage(id, g.Id, sent)
		m.DecryptedMessageBytes = content
		m.ExpiresAtNs, m.ExpiryKnown = nil, ptr(true)
		return m
	}
	text := envelope(t, "xmtp.org", "text", 1)
	custom := envelope(t, "example.com", "poll", 3)
	futureExpiry := msg("m-future-expiry", group, 4, text)
	futureExpiry.ExpiresAtNs = ptr(exportAt + 1)
	unknownExpiry := msg("m-unknown-expiry", group, 5, text)
	unknownExpiry.ExpiryKnown = nil
	expired := msg("m-expired", group, 6, text)
	expired.ExpiresAtNs = ptr(exportAt)
	membership := msg("m-membership", group, 7, envelope(t, "xmtp.org", "group_membership_change", 1))
	membership.Kind = mb.GroupMessageKindSave_GROUP_MESSAGE_KIND_SAVE_MEMBERSHIP_CHANGE
	all := []*mb.GroupMessageSave{
		msg("m-dm", dm, 1, text),
		msg("m-text", group, 1, text),
		msg("m-custom", group, 2, custom),
		msg("m-raw", group, 3, []byte("\xff not an envelope")),
		futureExpiry, unknownExpiry, expired, membership,
	}
	if _, err := s.AppendMessages(ctx, owner, all, store.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendMessages(ctx, owner, []*mb.GroupMessageSave{msg("m-sync", sync, 1, text), msg("m-oneshot", oneshot, 1, text)}, store.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendMessages(ctx, owner, []*mb.GroupMessageSave{msg("m-restored", &gb.GroupSave{Id: storetest.GroupID("g-restored")}, 1, text)}, store.AppendOptions{AllowRestored: true}); err != nil {
		t.Fatal(err)
	}
	// Messages an import brought into a live group: one of known expiry
	// (none), one of unknown expiry (ARCH-019).
	restoredKnown := msg("m-restored-known", group, 8, text)
	restoredUnknown := msg("m-restored-unknown", group, 9, text)
	restoredUnknown.ExpiryKnown = nil
	if _, err := s.AppendMessages(ctx, owner, []*mb.GroupMessageSave{restoredKnown, restoredUnknown}, store.AppendOptions{AllowRestored: true}); err != nil {
		t.Fatal(err)
	}
	f.included = []*mb.GroupMessageSave{all[0], all[1], all[2], all[3], futureExpiry, unknownExpiry, restoredKnown, restoredUnknown}
	f.consent = []*cs.ConsentSave{
		storetest.Consent("inbox-a", cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED, 10),
		storetest.Consent("inbox-b", cs.ConsentStateSave_CONSENT_STATE_SAVE_DENIED, 11),
	}
	if _, err := s.MergeConsent(ctx, owner, f.consent); err != nil {
		t.Fatal(err)
	}
	return f
}

func export(t *testing.T, s store.Store, owner string, opts *ds.ArchiveOptions) ([]byte, Counts) {
	t.Helper()
	var buf bytes.Buffer
	counts, err := Export(t.Context(), s, owner, key, opts, exportAt, &buf, ExportConfig{})
	if err != nil {
		t.Fatalf("Export: %v", err)
	}
	return buf.Bytes(), counts
}

// elements reads an archive back with the container alone.
func elements(t *testing.T, data []byte) (*ds.BackupMetadataSave, []*ds.BackupElement) {
	t.Helper()
	r, err := archive.NewReader(bytes.NewReader(data), key, archive.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	meta, err := r.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	var out []*ds.BackupElement
	for {
		el, err := r.Next()
		if errors.Is(err, io.EOF) {
			return meta, out
		}
		if err != nil {
			t.Fatalf("reading the archive back after %d elements: %v", len(out), err)
		}
		out = append(out, el)
	}
}

func ids[T interface{ GetId() []byte }](xs []T) []string {
	var out []string
	for _, x := range xs {
		out = append(out, string(x.GetId()))
	}
	return out
}

func TestExportSelection_ARCH006_ARCH007_ARCH010_ARCH026(t *testing.T) {
	forEachEngine(t, func(t *testing.T, s store.Store) {
		owner := storetest.Owner("export")
		f := fill(t, s, owner)
		data, counts := export(t, s, owner, nil)
		meta, els := elements(t, data)
		diff(t, "ARCH-006/-017 metadata: both categories, no window, the export time", meta, &ds.BackupMetadataSave{
			Elements: []ds.BackupElementSelection{selMessages, selConsent}, ExportedAtNs: exportAt,
		})
		var groups []*gb.GroupSave
		var msgs []*mb.GroupMessageSave
		var consent []*cs.ConsentSave
		seen := map[string]bool{}
		for _, el := range els {
			switch {
			case el.GetGroup() != nil:
				groups = append(groups, el.GetGroup())
				seen[string(el.GetGroup().Id)] = true
			case el.GetGroupMessage() != nil:
				if !seen[string(el.GetGroupMessage().GroupId)] {
					t.Errorf("ARCH-007: message %s before its group", el.GetGroupMessage().Id)
				}
				if len(consent) > 0 {
					t.Error("a message after consent")
				}
				msgs = append(msgs, el.GetGroupMessage())
			case el.GetConsent() != nil:
				consent = append(consent, el.GetConsent())
			}
		}
		diff(t, "groups (no sync, one-shot or Restored: ARCH-010, ARCH-026)", groups, f.eligibleGroups)
		diff(t, "messages (ARCH-008 bytes, ARCH-009 expiry, application only)", ids(msgs), ids(f.included))
		for i := range min(len(msgs), len(f.included)) {
			want := proto.Clone(f.included[i]).(*mb.GroupMessageSave)
			if want.Id != nil && string(want.Id) != "m-raw" {
				// The envelope's type decides the identifier fields (ARCH-008).
				ec := &mc.EncodedContent{}
				_ = proto.Unmarshal(want.DecryptedMessageBytes, ec)
				want.AuthorityId, want.ContentType = ec.Type.AuthorityId, ec.Type.TypeId
				want.VersionMajor, want.VersionMinor = int32(ec.Type.VersionMajor), int32(ec.Type.VersionMinor)
				// The retired enum goes out only where it names the
				// envelope's type: the fixtures' TEXT fits xmtp.org/text
				// alone, and is dropped elsewhere (ARCH-008).
				if ec.Type.AuthorityId != "xmtp.org" || ec.Type.TypeId != "text" {
					want.ContentTypeSave = mb.ContentTypeSave_CONTENT_TYPE_SAVE_UNSPECIFIED
				}
			}
			if string(want.Id) == "m-raw" {
				// Untyped content keeps its stored type fields, and the
				// enum goes out only where it names that type: TEXT does
				// not name example.com/custom (issue 45, finding 3).
				want.ContentTypeSave = mb.ContentTypeSave_CONTENT_TYPE_SAVE_UNSPECIFIED
			}
			diff(t, "message "+string(want.Id), msgs[i], want)
		}
		diff(t, "consent", consent, f.consent)
		if counts != (Counts{Groups: 3, Messages: uint64(len(f.included)), Consent: 2, ChangeSeq: counts.ChangeSeq}) {
			t.Errorf("counts %+v", counts)
		}
	})
}

func TestExportWindowAndOptions_ARCH009_ARCH017_ARCH019(t *testing.T) {
	forEachEngine(t, func(t *testing.T, s store.Store) {
		owner := storetest.Owner("window")
		f := fill(t, s, owner)
		// (1, 3]: m-custom (2) and m-raw (3); every eligible group still,
		// even those with nothing in the window (the reference's bug).
		data, _ := export(t, s, owner, &ds.ArchiveOptions{Elements: []ds.BackupElementSelection{selMessages}, StartNs: ptr(int64(1)), EndNs: ptr(int64(3))})
		meta, els := elements(t, data)
		if meta.GetStartNs() != 1 || meta.GetEndNs() != 3 || len(meta.Elements) != 1 {
			t.Errorf("metadata %v", meta)
		}
		var groups, msgs []string
		for _, el := range els {
			if g := el.GetGroup(); g != nil {
				groups = append(groups, string(g.Id))
			}
			if m := el.GetGroupMessage(); m != nil {
				msgs = append(msgs, string(m.Id))
			}
			if el.GetConsent() != nil {
				t.Error("consent exported without being selected")
			}
		}
		diff(t, "groups in a window", groups, ids(f.eligibleGroups))
		diff(t, "messages in (1, 3]", msgs, []string{"m-custom", "m-raw"})

		data, _ = export(t, s, owner, &ds.ArchiveOptions{Elements: []ds.BackupElementSelection{selMessages}, ExcludeDisappearingMessages: true})
		_, els = elements(t, data)
		msgs = nil
		for _, el := range els {
			if m := el.GetGroupMessage(); m != nil {
				msgs = append(msgs, string(m.Id))
			}
		}
		// ARCH-009: none with an expiry, and no restored message whose
		// expiry is unknown; a live message whose expiry is unknown stays.
		diff(t, "exclude disappearing", msgs, []string{"m-dm", "m-text", "m-custom", "m-raw", "m-unknown-expiry", "m-restored-known"})

		data, counts := export(t, s, owner, &ds.ArchiveOptions{})
		meta, els = elements(t, data)
		if len(els) != 0 || len(meta.Elements) != 0 || counts != (Counts{ChangeSeq: counts.ChangeSeq}) {
			t.Errorf("ARCH-017 explicit empty selection: %d elements, %v", len(els), meta)
		}
		data, _ = export(t, s, owner, &ds.ArchiveOptions{Elements: []ds.BackupElementSelection{selConsent}})
		_, els = elements(t, data)
		if len(els) != 2 || els[0].GetConsent() == nil {
			t.Errorf("consent only: %v", els)
		}
		var buf bytes.Buffer
		if _, err := Export(t.Context(), s, owner, key, &ds.ArchiveOptions{StartNs: ptr(int64(5)), EndNs: ptr(int64(4))}, exportAt, &buf, ExportConfig{}); !IsOptionsError(err) || buf.Len() != 0 {
			t.Errorf("backwards window: %v, %d bytes written", err, buf.Len())
		}
		if _, err := Export(t.Context(), s, owner, key[:31], nil, exportAt, &buf, ExportConfig{}); !errors.Is(err, archive.ErrKeySize) || buf.Len() != 0 {
			t.Errorf("ARCH-012 short key: %v, %d bytes written", err, buf.Len())
		}
	})
}

// snapshotOf reads everything an owner has, for before/after comparisons.
func snapshotOf(t *testing.T, s store.Store, owner string) (groups []*gb.GroupSave, msgs []*mb.GroupMessageSave, consent []*cs.ConsentSave) {
	t.Helper()
	err := s.Snapshot(t.Context(), owner, func(snap store.Snapshot) error {
		if err := snap.EachGroup(t.Context(), func(g *gb.GroupSave) error {
			groups = append(groups, g)
			return snap.EachMessage(t.Context(), store.MessageQuery{GroupID: g.Id}, func(m *mb.GroupMessageSave) error {
				msgs = append(msgs, m)
				return nil
			})
		}); err != nil {
			return err
		}
		return snap.EachConsent(t.Context(), func(c *cs.ConsentSave) error { consent = append(consent, c); return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	return groups, msgs, consent
}

func TestImportIntoEmptyOwner_ARCH013_ARCH016_ARCH020(t *testing.T) {
	forEachEngine(t, func(t *testing.T, s store.Store) {
		a, b := storetest.Owner("a"), storetest.Owner("b")
		fill(t, s, a)
		data, counts := export(t, s, a, nil)
		_, exported := elements(t, data)

		res, err := Import(t.Context(), s, b, key, bytes.NewReader(data), ImportOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Groups.Inserted != counts.Groups || res.Messages.Inserted != counts.Messages || res.Consent.Inserted != counts.Consent {
			t.Errorf("import counts %+v; export counts %+v", res, counts)
		}
		groups, msgs, consent := snapshotOf(t, s, b)
		var wantGroups []*gb.GroupSave
		var wantMsgs []*mb.GroupMessageSave
		var wantConsent []*cs.ConsentSave
		for _, el := range exported {
			switch {
			case el.GetGroup() != nil:
				wantGroups = append(wantGroups, storetest.RestoredForm(el.GetGroup()))
			case el.GetGroupMessage() != nil:
				wantMsgs = append(wantMsgs, el.GetGroupMessage())
			case el.GetConsent() != nil:
				wantConsent = append(wantConsent, el.GetConsent())
			}
		}
		diff(t, "ARCH-020 groups Restored with their archived metadata", groups, wantGroups)
		diff(t, "ARCH-013 messages, ids and bytes exact", msgs, wantMsgs)
		diff(t, "consent", consent, wantConsent)

		// ARCH-016: the same archive again changes nothing.
		res, err = Import(t.Context(), s, b, key, bytes.NewReader(data), ImportOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Groups.Inserted+res.Groups.Updated+res.Messages.Inserted+res.Consent.Inserted+res.Consent.Updated != 0 {
			t.Errorf("second import changed records: %+v", res)
		}
		g2, m2, c2 := snapshotOf(t, s, b)
		diff(t, "groups after re-import", g2, groups)
		diff(t, "messages after re-import", m2, msgs)
		diff(t, "consent after re-import", c2, consent)

		// ARCH-026: B's restored groups stay out of B's exports until
		// activated.
		data, counts = export(t, s, b, nil)
		if counts.Groups != 0 || counts.Messages != 0 || counts.Consent != 2 {
			t.Errorf("export of restored history: %+v", counts)
		}
		if _, _, err := s.ActivateGroup(t.Context(), b, storetest.GroupID("g-group")); err != nil {
			t.Fatal(err)
		}
		if _, counts = export(t, s, b, nil); counts.Groups != 1 || counts.Messages != 7 { // g-group's seven eligible messages
			t.Errorf("export after activation: %+v", counts)
		}
		_ = data
	})
}

func TestImportKeepsLiveState_ARCH014(t *testing.T) {
	forEachEngine(t, func(t *testing.T, s store.Store) {
		a, b := storetest.Owner("a"), storetest.Owner("b")
		fill(t, s, a)
		data, _ := export(t, s, a, nil)

		live := storetest.MinimalGroup("g-group")
		live.MembershipState = gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_PENDING
		live.LastMessageNs = ptr(int64(1))
		live.MutableMetadata = &gb.MutableMetadataSave{Attributes: map[string]string{"group_name": "live name"}}
		liveLater := storetest.MinimalGroup("g-dm")
		liveLater.LastMessageNs = ptr(exportAt * 2)
		for _, g := range []*gb.GroupSave{live, liveLater} {
			if _, err := s.PutGroup(t.Context(), b, g); err != nil {
				t.Fatal(err)
			}
		}
		liveMsg := storetest.Message("m-text", live.Id, 99)
		if _, err := s.AppendMessages(t.Context(), b, []*mb.GroupMessageSave{liveMsg}, store.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
		newer := storetest.Consent("inbox-a", cs.ConsentStateSave_CONSENT_STATE_SAVE_DENIED, 10) // equal time: stored wins
		if _, err := s.MergeConsent(t.Context(), b, []*cs.ConsentSave{newer}); err != nil {
			t.Fatal(err)
		}

		res, err := Import(t.Context(), s, b, key, bytes.NewReader(data), ImportOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Groups.Updated != 1 || res.Groups.Unchanged != 1 || res.Groups.Inserted != 1 || res.Messages.Unchanged != 1 || res.Consent.Unchanged != 1 {
			t.Errorf("counts %+v", res)
		}
		got, _ := s.GetGroup(t.Context(), b, live.Id)
		want := proto.Clone(live).(*gb.GroupSave)
		want.LastMessageNs = storetest.FullGroup("x").LastMessageNs
		diff(t, "a live group keeps state and metadata, takes the later last_message_ns", got, want)
		got, _ = s.GetGroup(t.Context(), b, liveLater.Id)
		diff(t, "a live group with a later last message", got, liveLater)
		page, _ := s.ListMessages(t.Context(), b, store.MessageQuery{GroupID: live.Id, Limit: 100})
		msgs := page.Messages
		if len(msgs) == 0 || !proto.Equal(msgs[len(msgs)-1], liveMsg) && !proto.Equal(msgs[0], liveMsg) {
			t.Errorf("the stored message with an archived id changed")
		}
		cons, _ := s.ListConsent(t.Context(), b, nil, 10)
		if !proto.Equal(cons[0], newer) {
			t.Errorf("consent at equal time replaced the stored record: %v", cons[0])
		}
	})
}

// archiveOf writes elements with the container directly.
func archiveOf(t *testing.T, els ...*ds.BackupElement) []byte {
	var buf bytes.Buffer
	w, err := archive.NewWriter(&buf, key)
	if err != nil {
		t.Fatal(err)
	}
	for _, el := range els {
		if err := w.WriteElement(el); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func metaEl() *ds.BackupElement {
	return &ds.BackupElement{Element: &ds.BackupElement_Metadata{Metadata: &ds.BackupMetadataSave{ExportedAtNs: 1}}}
}
func groupEl(id string) *ds.BackupElement {
	return &ds.BackupElement{Element: &ds.BackupElement_Group{Group: storetest.MinimalGroup(id)}}
}
func msgEl(id, group string) *ds.BackupElement {
	return &ds.BackupElement{Element: &ds.BackupElement_GroupMessage{GroupMessage: storetest.Message(id, storetest.GroupID(group), 1)}}
}

func TestImportFailureKeepsEarlierRecords_ARCH021(t *testing.T) {
	forEachEngine(t, func(t *testing.T, s store.Store) {
		owner := storetest.Owner("fail")
		els := []*ds.BackupElement{metaEl(), groupEl("g1")}
		for i := range 2500 {
			els = append(els, msgEl(fmt.Sprintf("m%04d", i), "g1"))
		}
		els = append(els, groupEl("g2"), msgEl("last", "g2"))
		data := archiveOf(t, els...)

		// Cut in the middle: the import fails naming a record, and what it
		// applied is exactly the records before that one.
		_, err := Import(t.Context(), s, owner, key, bytes.NewReader(data[:len(data)/2]), ImportOptions{})
		var re *archive.RecordError
		if !errors.As(err, &re) || !errors.Is(err, archive.ErrTruncated) {
			t.Fatalf("truncated import: %v; want a RecordError", err)
		}
		_, msgs, _ := snapshotOf(t, s, owner)
		// Records 2.. are messages m0000..: every one before the failing
		// record is applied, none after.
		if want := int(re.Record) - 2; len(msgs) != want {
			t.Errorf("failed at record %d with %d messages applied; want %d", re.Record, len(msgs), want)
		}
		if _, err := s.GetGroup(t.Context(), owner, storetest.GroupID("g2")); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("a group after the failing record was applied: %v", err)
		}

		// The retry from the start completes.
		res, err := Import(t.Context(), s, owner, key, bytes.NewReader(data), ImportOptions{})
		if err != nil {
			t.Fatalf("retry: %v", err)
		}
		if res.Messages.Inserted+res.Messages.Unchanged != 2501 || res.Messages.Unchanged != uint64(len(msgs)) {
			t.Errorf("retry counts %+v", res.Messages)
		}
	})
}

func TestImportMissingGroupFailsAgain_ARCH021(t *testing.T) {
	forEachEngine(t, func(t *testing.T, s store.Store) {
		owner := storetest.Owner("missing")
		data := archiveOf(t, metaEl(), groupEl("g1"), msgEl("m1", "g1"), msgEl("orphan", "nowhere"), msgEl("m2", "g1"))
		for range 2 {
			_, err := Import(t.Context(), s, owner, key, bytes.NewReader(data), ImportOptions{})
			var ie *ImportError
			if !errors.As(err, &ie) || ie.Record != 3 || !errors.Is(err, ErrMissingGroup) {
				t.Fatalf("%v; want ErrMissingGroup at record 3", err)
			}
			_, msgs, _ := snapshotOf(t, s, owner)
			diff(t, "applied", ids(msgs), []string{"m1"})
		}
	})
}

func TestImportRejectsMalformedRecords(t *testing.T) {
	forEachEngine(t, func(t *testing.T, s store.Store) {
		owner := storetest.Owner("malformed")
		bad := msgEl("", "g1") // a message without an id
		data := archiveOf(t, metaEl(), groupEl("g1"), msgEl("m1", "g1"), bad)
		_, err := Import(t.Context(), s, owner, key, bytes.NewReader(data), ImportOptions{})
		var ie *ImportError
		if !errors.As(err, &ie) || ie.Record != 3 {
			t.Fatalf("%v; want an ImportError at record 3", err)
		}
		_, msgs, _ := snapshotOf(t, s, owner)
		diff(t, "applied before the malformed record", ids(msgs), []string{"m1"})

		// ARCH-006: a record 0 that is not metadata applies nothing.
		other := storetest.Owner("no-metadata")
		if _, err := Import(t.Context(), s, other, key, bytes.NewReader(archiveOf(t, groupEl("g1"), metaEl())), ImportOptions{}); !errors.Is(err, archive.ErrNotMetadata) {
			t.Errorf("%v; want ErrNotMetadata", err)
		}
		if g, _, _ := snapshotOf(t, s, other); len(g) != 0 {
			t.Error("a group was applied from an archive without metadata first")
		}
	})
}

func TestVerify(t *testing.T) {
	forEachEngine(t, func(t *testing.T, s store.Store) {
		owner := storetest.Owner("verify")
		fill(t, s, owner)
		data, counts := export(t, s, owner, nil)
		rep, err := Verify(bytes.NewReader(data), key, archive.ReaderOptions{})
		if err != nil || rep.Err != nil {
			t.Fatal(err, rep.Err)
		}
		if rep.Groups != counts.Groups || rep.Messages != counts.Messages || rep.Consent != counts.Consent || rep.Records != 1+counts.Groups+counts.Messages+counts.Consent {
			t.Errorf("report %+v; export %+v", rep, counts)
		}
		rep, _ = Verify(bytes.NewReader(data[:len(data)-3]), key, archive.ReaderOptions{})
		var re *archive.RecordError
		if !errors.As(rep.Err, &re) {
			t.Errorf("truncated: %v", rep.Err)
		}
		if _, err := Verify(bytes.NewReader(data), key[:16], archive.ReaderOptions{}); !errors.Is(err, archive.ErrKeySize) {
			t.Errorf("short key: %v", err)
		}
	})
}

// ARCH-022: an archive in the legacy repeated-nonce form imports, every
// element applied, the retry counted.
func TestImportLegacyArchive_ARCH002_ARCH022(t *testing.T) {
	forEachEngine(t, func(t *testing.T, s store.Store) {
		data, err := archivetest.Legacy(key, [12]byte{7}, metaEl(), groupEl("g1"), msgEl("m1", "g1"), msgEl("m2", "g1"))
		if err != nil {
			t.Fatal(err)
		}
		owner := storetest.Owner("legacy")
		res, err := Import(t.Context(), s, owner, key, bytes.NewReader(data), ImportOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Groups.Inserted != 1 || res.Messages.Inserted != 2 || res.Legacy != 3 {
			t.Errorf("legacy import %+v", res)
		}
		_, msgs, _ := snapshotOf(t, s, owner)
		diff(t, "messages", ids(msgs), []string{"m1", "m2"})
	})
}

// TestImportUnderSmallReadAhead: an import whose read-ahead budget holds
// only a few records at once completes, with every message applied (the
// reader waits for budget that written batches give back, while a batch
// is written and the next fills).
func TestImportUnderSmallReadAhead(t *testing.T) {
	forEachEngine(t, func(t *testing.T, s store.Store) {
		els := []*ds.BackupElement{metaEl(), groupEl("g1")}
		const n = 300
		for i := range n {
			el := msgEl(fmt.Sprintf("m%04d", i), "g1")
			el.GetGroupMessage().DecryptedMessageBytes = bytes.Repeat([]byte{byte(i)}, 64<<10)
			els = append(els, el)
		}
		data := archiveOf(t, els...)
		const readAhead = 2 << 20 // about 15 records at twice their size
		call := budget.NewPool(1<<30).NewCall("import read-ahead", readAhead)
		done := make(chan struct{})
		var res ImportResult
		var err error
		go func() {
			defer close(done)
			res, err = Import(t.Context(), s, storetest.Owner("small-ahead"), key, bytes.NewReader(data), ImportOptions{ReadAhead: call, ReadAheadBytes: readAhead})
		}()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Fatal("import under a small read-ahead did not finish in 60 s")
		}
		if err != nil || res.Messages.Inserted != n {
			t.Fatalf("import: %+v, %v", res.Messages, err)
		}
	})
}

// failingWriter takes limit bytes, then fails every write.
type failingWriter struct{ limit int }

var errWriterBroken = errors.New("the writer broke")

func (w *failingWriter) Write(p []byte) (int, error) {
	if len(p) > w.limit {
		w.limit = 0
		return 0, errWriterBroken
	}
	w.limit -= len(p)
	return len(p), nil
}

// TestExportWriteFailureStopsTheReader: when the archive's writer fails
// in the middle, Export returns that error (ARCH-017: a failed export is
// not an archive), and the goroutine reading the snapshot ends with it,
// its transaction closed, however many rows were left to read.
func TestExportWriteFailureStopsTheReader(t *testing.T) {
	forEachEngine(t, func(t *testing.T, s store.Store) {
		owner := storetest.Owner("broken-writer")
		if _, err := s.PutGroup(t.Context(), owner, storetest.MinimalGroup("g")); err != nil {
			t.Fatal(err)
		}
		msgs := storetest.Messages("m", storetest.GroupID("g"), 5000, 0)
		for _, m := range msgs {
			m.DecryptedMessageBytes = bytes.Repeat([]byte{1}, 1024)
		}
		if _, err := s.AppendMessages(t.Context(), owner, msgs, store.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err := Export(t.Context(), s, owner, key, nil, exportAt, &failingWriter{limit: 200 << 10}, ExportConfig{})
		if !errors.Is(err, errWriterBroken) {
			t.Fatalf("export: %v; want the writer's error", err)
		}
		// The reader has ended (no goroutine runs Export's reader), and the
		// store takes a write (on SQLite, a snapshot left open would not
		// block it, but its connection would stay busy; on Postgres its
		// transaction would hold a pool connection).
		if !eventually.Within(5*time.Second, func() bool { return eventually.Goroutines("backup.Export.func") == 0 }) {
			t.Errorf("%d export readers still run after the failed export", eventually.Goroutines("backup.Export.func"))
		}
		if _, err := s.AppendMessages(t.Context(), owner, storetest.Messages("after", storetest.GroupID("g"), 1, 0), store.AppendOptions{}); err != nil {
			t.Errorf("a write after the failed export: %v", err)
		}
	})
}

// TestProgressCounts: Export counts every record it writes (ExportConfig.Written) and
// Import every record it takes in, the metadata included.
func TestProgressCounts(t *testing.T) {
	forEachEngine(t, func(t *testing.T, s store.Store) {
		owner := storetest.Owner("progress")
		fill(t, s, owner)
		var buf bytes.Buffer
		var written atomic.Uint64
		counts, err := Export(t.Context(), s, owner, key, nil, exportAt, &buf, ExportConfig{Written: &written})
		if err != nil {
			t.Fatal(err)
		}
		if want := counts.Groups + counts.Messages + counts.Consent + 1; written.Load() != want {
			t.Errorf("export counted %d records, wrote %d", written.Load(), want)
		}
		var taken atomic.Uint64
		res, err := Import(t.Context(), s, storetest.Owner("progress-in"), key, bytes.NewReader(buf.Bytes()), ImportOptions{Progress: &taken})
		if err != nil {
			t.Fatal(err)
		}
		if taken.Load() != res.Records-res.Skipped || taken.Load() != written.Load() {
			t.Errorf("import counted %d records of %d read (%d skipped), %d written", taken.Load(), res.Records, res.Skipped, written.Load())
		}
	})
}
