package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/google/go-cmp/cmp"

	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/store"
)

const (
	allowed  = gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_ALLOWED
	restored = gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_RESTORED
	pending  = gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_PENDING
)

// Run runs the whole conformance suite against the engine open makes.
func Run(t *testing.T, open func(t testing.TB) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"GroupRoundTripEveryField", testGroupRoundTrip},
		{"PutGroupReplaces", testPutGroupReplaces},
		{"PutGroupOverRestoredFails", testPutGroupOverRestored},
		{"ListGroupsPages", testListGroupsPages},
		{"MessageRoundTripEveryField_ARCH019", testMessageRoundTrip},
		{"AppendMissingGroupWritesNothing", testAppendMissingGroup},
		{"ARCH015_AppendToRestoredGroupFails", testAppendRestored},
		{"ARCH013_KnownMessageUnchanged", testKnownMessageUnchanged},
		{"ARCH013_KnownMessageUnchangedMostlyNew", testKnownMessageUnchangedMostlyNew},
		{"ListMessagesOrderWindowAndPages", testListMessages},
		{"DeleteMessage", testDeleteMessage},
		{"ConsentMergeRule", testConsentMerge},
		{"ListConsentPages", testListConsentPages},
		{"ActivateGroup", testActivateGroup},
		{"MergeGroups_ARCH014_ARCH020_ARCH024", testMergeGroups},
		{"OwnerIsolation", testOwnerIsolation},
		{"SnapshotIsConsistent", testSnapshotConsistent},
		{"SnapshotStreamsPastOnePage", testSnapshotPages},
		{"BulkAppend100k", testBulkAppend},
		{"ARCH013_ConcurrentAppendsOfTheSameIDs", testConcurrentAppends},
		{"StreamMessagesIsListMessages", testStreamMessages},
		{"JobLifecycle", testJobLifecycle},
		{"BackupCommitFencedByAttempt", testBackupCommitFenced},
		{"IncrementAndBaseDeleteSerialize", testIncrementAndBaseDeleteSerialize},
		{"OneRunningExportJobPerOwner", testOneRunningExport},
		{"ExpiredJobsFail", testExpireJobs},
		{"ExpiredJobsClaimed", testClaimJob},
		{"ExpiredJobsClaimedOnce", testClaimJobOnce},
		{"ExpiredMessagesHiddenThenPurged", testPurgeExpired},
		{"DryRunLookups", testLookups},
		{"ListJobsPages", testListJobs},
		{"DeleteFinishedJobs", testDeleteFinishedJobs},
		{"BackupCatalogIsOwnerBound", testBackupCatalog},
		{"BackupAccounting", testBackupAccounting},
		{"BackupChains", testBackupChains},
		{"OwnerKeys", testOwnerKeys},
		{"KEKRetirements", testKEKRetirements},
		{"LegacyBackupKeys", testLegacyBackupKeys},
		{"HoldsKeepBackups", testHoldsKeepBackups},
		{"EraseOwnerRows", testEraseOwnerRows},
		{"FinishedErasuresKept", testFinishedErasuresKept},
		{"ErasureFence", testErasureFence},
		{"ErasedOwners", testErasedOwners},
		{"ErasureUnderWriters", testErasureUnderWriters},
		{"HistoryFiles", testHistoryFiles},
		{"HistoryReservations", testHistoryReservations},
		{"ProbeWrite", testProbeWrite},
		{"ScheduleTickClaimedOnce", testScheduleTicks},
		{"JobRequestIDs", testJobRequestIDs},
		{"ChangesSinceASnapshot", testChangesSince},
		{"ChangesUnderConcurrentWriters", testChangesUnderConcurrentWriters},
		{"Tombstones_ARCH013_ARCH014", testTombstones},
		{"Replacing", testReplacing},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, open(t))
		})
	}
}

func ctx(t *testing.T) context.Context { return t.Context() }

func mustPut(t *testing.T, s store.Store, owner string, g *gb.GroupSave) {
	t.Helper()
	if _, err := s.PutGroup(ctx(t), owner, g); err != nil {
		t.Fatalf("PutGroup %q: %v", g.GetId(), err)
	}
}

func mustAppend(t *testing.T, s store.Store, owner string, msgs ...*mb.GroupMessageSave) []store.Outcome {
	t.Helper()
	out, err := s.AppendMessages(ctx(t), owner, msgs, store.AppendOptions{})
	if err != nil {
		t.Fatalf("AppendMessages: %v", err)
	}
	return out
}

func equal(t *testing.T, what string, got, want any) {
	t.Helper()
	if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
		t.Errorf("%s: (-want +got)\n%s", what, d)
	}
}

// allMessages reads every message of a group through ListMessages.
func allMessages(t *testing.T, s store.Store, owner string, group []byte) []*mb.GroupMessageSave {
	t.Helper()
	page, err := s.ListMessages(ctx(t), owner, store.MessageQuery{GroupID: group, Limit: 1_000_000})
	if err != nil {
		t.Fatalf("ListMessages: %v", err)
	}
	return page.Messages
}

func testGroupRoundTrip(t *testing.T, s store.Store) {
	owner := Owner("rt")
	variants := []*gb.GroupSave{
		fullGroup("full"),
		minimalGroup("minimal"),
		// Present but empty metadata messages stay present (ARCH-024
		// tells an absent creator from an empty one only through them).
		func() *gb.GroupSave {
			g := minimalGroup("empty-metadata")
			g.Metadata, g.MutableMetadata = &gb.ImmutableMetadataSave{}, &gb.MutableMetadataSave{}
			return g
		}(),
		func() *gb.GroupSave {
			g := fullGroup("dm")
			g.ConversationType = gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_DM
			g.MembershipState = gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_PENDING_REMOVE
			g.WelcomeId, g.LastMessageNs = ptr(int64(0)), ptr(int64(-1))
			return g
		}(),
		func() *gb.GroupSave {
			g := minimalGroup("sync")
			g.ConversationType = gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_SYNC
			return g
		}(),
		func() *gb.GroupSave {
			g := minimalGroup("oneshot")
			g.ConversationType = gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_ONESHOT
			g.MembershipState = gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_REJECTED
			return g
		}(),
	}
	for _, g := range variants {
		created, err := s.PutGroup(ctx(t), owner, g)
		if err != nil || !created {
			t.Fatalf("PutGroup %s: created %v, %v", g.Id, created, err)
		}
		got, err := s.GetGroup(ctx(t), owner, g.Id)
		if err != nil {
			t.Fatalf("GetGroup %s: %v", g.Id, err)
		}
		equal(t, string(g.Id), got, g)
		if (got.Metadata == nil) != (g.Metadata == nil) || (got.MutableMetadata == nil) != (g.MutableMetadata == nil) {
			t.Errorf("%s: metadata presence changed", g.Id)
		}
	}
}

func testPutGroupReplaces(t *testing.T, s store.Store) {
	owner := Owner("put")
	mustPut(t, s, owner, fullGroup("g"))
	next := minimalGroup("g")
	next.MembershipState = pending
	created, err := s.PutGroup(ctx(t), owner, next)
	if err != nil || created {
		t.Fatalf("second PutGroup: created %v, %v; want replaced", created, err)
	}
	got, err := s.GetGroup(ctx(t), owner, []byte("g"))
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "replaced group", got, next)
}

func testPutGroupOverRestored(t *testing.T, s store.Store) {
	owner := Owner("restored")
	archived := fullGroup("g")
	if _, err := s.MergeGroups(ctx(t), owner, []*gb.GroupSave{archived}); err != nil {
		t.Fatal(err)
	}
	_, err := s.PutGroup(ctx(t), owner, minimalGroup("g"))
	if !errors.Is(err, store.ErrGroupInactive) {
		t.Fatalf("PutGroup over a Restored group: %v; want ErrGroupInactive", err)
	}
	got, _ := s.GetGroup(ctx(t), owner, []byte("g"))
	equal(t, "restored group after refused put", got, RestoredForm(archived))
}

func testListGroupsPages(t *testing.T, s store.Store) {
	owner := Owner("list")
	var want [][]byte
	for i := range 25 {
		id := []byte{byte(25 - i), 0xff, byte(i)}
		mustPut(t, s, owner, minimalGroup(string(id)))
		want = append(want, id)
	}
	slices.SortFunc(want, func(a, b []byte) int { return slices.Compare(a, b) })
	var got [][]byte
	var after []byte
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("ListGroups does not end")
		}
		page, err := s.ListGroups(ctx(t), owner, after, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range page {
			got = append(got, g.Id)
		}
		if len(page) < 10 {
			break
		}
		after = page[len(page)-1].Id
	}
	equal(t, "group ids in order", got, want)
}

func testMessageRoundTrip(t *testing.T, s store.Store) {
	owner := Owner("msg")
	g := fullGroup("g")
	mustPut(t, s, owner, g)
	full := FullMessage("full", g.Id, 10)
	minimal := &mb.GroupMessageSave{Id: []byte("minimal"), GroupId: g.Id}
	// Present-but-empty optional bytes, expiry known with no deadline, and
	// expiry explicitly not known: each distinction survives (ARCH-019).
	edges := FullMessage("edges", g.Id, 11)
	edges.ReferenceId, edges.ExpiresAtNs, edges.ExpiryKnown = []byte{}, nil, ptr(true)
	unknownExpiry := FullMessage("unknown-expiry", g.Id, 12)
	unknownExpiry.ExpiresAtNs, unknownExpiry.ExpiryKnown = nil, ptr(false)
	absentExpiry := FullMessage("absent-expiry", g.Id, 13)
	absentExpiry.ExpiresAtNs, absentExpiry.ExpiryKnown, absentExpiry.ReferenceId = nil, nil, nil
	want := []*mb.GroupMessageSave{minimal, full, edges, unknownExpiry, absentExpiry}
	mustAppend(t, s, owner, want...)
	got := allMessages(t, s, owner, g.Id)
	equal(t, "messages", got, want)
	for i := range min(len(got), len(want)) {
		if (got[i].ReferenceId == nil) != (want[i].ReferenceId == nil) {
			t.Errorf("%s: reference_id presence changed", want[i].Id)
		}
		if (got[i].ExpiryKnown == nil) != (want[i].ExpiryKnown == nil) {
			t.Errorf("%s: expiry_known presence changed", want[i].Id)
		}
	}
}

func testAppendMissingGroup(t *testing.T, s store.Store) {
	owner := Owner("missing")
	mustPut(t, s, owner, minimalGroup("g"))
	_, err := s.AppendMessages(ctx(t), owner, []*mb.GroupMessageSave{
		Message("ok", []byte("g"), 1),
		Message("orphan", []byte("nope"), 2),
	}, store.AppendOptions{})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("append to a missing group: %v; want ErrNotFound", err)
	}
	if got := allMessages(t, s, owner, []byte("g")); len(got) != 0 {
		t.Errorf("a failed append stored %d messages", len(got))
	}
}

func testAppendRestored(t *testing.T, s store.Store) {
	owner := Owner("restored")
	if _, err := s.MergeGroups(ctx(t), owner, []*gb.GroupSave{fullGroup("r")}); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, owner, minimalGroup("live"))
	_, err := s.AppendMessages(ctx(t), owner, []*mb.GroupMessageSave{
		Message("live-1", []byte("live"), 1),
		Message("r-1", []byte("r"), 1),
	}, store.AppendOptions{})
	if !errors.Is(err, store.ErrGroupInactive) {
		t.Fatalf("append to a Restored group: %v; want ErrGroupInactive", err)
	}
	if got := allMessages(t, s, owner, []byte("live")); len(got) != 0 {
		t.Errorf("a refused append stored %d messages", len(got))
	}
	// Import adds history to the groups it restored.
	out, err := s.AppendMessages(ctx(t), owner, []*mb.GroupMessageSave{Message("r-1", []byte("r"), 1)}, store.AppendOptions{AllowRestored: true})
	if err != nil || out[0] != store.Inserted {
		t.Fatalf("import append to a Restored group: %v, %v", out, err)
	}
}

func testKnownMessageUnchanged(t *testing.T, s store.Store) {
	owner := Owner("known")
	mustPut(t, s, owner, minimalGroup("g"))
	first := FullMessage("m", []byte("g"), 5)
	if out := mustAppend(t, s, owner, first); out[0] != store.Inserted {
		t.Fatalf("first append: %v", out)
	}
	again := Message("m", []byte("g"), 6)
	again.DecryptedMessageBytes = []byte("other bytes")
	dupInBatch := Message("n", []byte("g"), 7)
	dupInBatch2 := Message("n", []byte("g"), 8)
	out := mustAppend(t, s, owner, again, dupInBatch, dupInBatch2)
	equal(t, "outcomes", out, []store.Outcome{store.Unchanged, store.Inserted, store.Unchanged})
	equal(t, "stored", allMessages(t, s, owner, []byte("g")), []*mb.GroupMessageSave{first, dupInBatch})
}

// testKnownMessageUnchangedMostlyNew: with the MostlyNew hint (import),
// a batch holding a stored id and a repeat comes out exactly as without.
func testKnownMessageUnchangedMostlyNew(t *testing.T, s store.Store) {
	owner := Owner("known-mostly-new")
	mustPut(t, s, owner, minimalGroup("g"))
	first := FullMessage("m", []byte("g"), 5)
	opts := store.AppendOptions{MostlyNew: true}
	if out, err := s.AppendMessages(ctx(t), owner, []*mb.GroupMessageSave{first}, opts); err != nil || out[0] != store.Inserted {
		t.Fatalf("first append: %v %v", out, err)
	}
	again := Message("m", []byte("g"), 6)
	again.DecryptedMessageBytes = []byte("other bytes")
	fresh := Message("n", []byte("g"), 7)
	repeat := Message("n", []byte("g"), 8)
	out, err := s.AppendMessages(ctx(t), owner, []*mb.GroupMessageSave{fresh, again, repeat}, opts)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "outcomes", out, []store.Outcome{store.Inserted, store.Unchanged, store.Unchanged})
	equal(t, "stored", allMessages(t, s, owner, []byte("g")), []*mb.GroupMessageSave{first, fresh})
	// All new, repeats within the batch included: one COPY.
	out, err = s.AppendMessages(ctx(t), owner, []*mb.GroupMessageSave{Message("p", []byte("g"), 9), Message("q", []byte("g"), 10), Message("p", []byte("g"), 11)}, opts)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "outcomes", out, []store.Outcome{store.Inserted, store.Inserted, store.Unchanged})
}

func testListMessages(t *testing.T, s store.Store) {
	owner := Owner("window")
	mustPut(t, s, owner, minimalGroup("g"))
	mustPut(t, s, owner, minimalGroup("other"))
	// Out of order, with ties on sent_at_ns broken by id.
	msgs := []*mb.GroupMessageSave{
		Message("c", []byte("g"), 30), Message("a", []byte("g"), 10), Message("b2", []byte("g"), 20),
		Message("b1", []byte("g"), 20), Message("d", []byte("g"), 40), Message("x", []byte("other"), 25),
	}
	mustAppend(t, s, owner, msgs...)
	ids := func(ms []*mb.GroupMessageSave) []string {
		var out []string
		for _, m := range ms {
			out = append(out, string(m.Id))
		}
		return out
	}
	equal(t, "send order", ids(allMessages(t, s, owner, []byte("g"))), []string{"a", "b1", "b2", "c", "d"})
	got, err := s.ListMessages(ctx(t), owner, store.MessageQuery{GroupID: []byte("g"), StartNs: ptr(int64(10)), EndNs: ptr(int64(30)), Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "window (10, 30]", ids(got.Messages), []string{"b1", "b2", "c"})
	var paged []string
	q := store.MessageQuery{GroupID: []byte("g"), Limit: 2}
	for range 5 {
		res, err := s.ListMessages(ctx(t), owner, q)
		if err != nil {
			t.Fatal(err)
		}
		page := res.Messages
		paged = append(paged, ids(page)...)
		if len(page) < q.Limit {
			break
		}
		q.After = &store.MessageCursor{SentAtNs: page[len(page)-1].SentAtNs, ID: page[len(page)-1].Id}
	}
	equal(t, "pages of 2", paged, []string{"a", "b1", "b2", "c", "d"})

	// A byte bound ends a page early, and says so; the first message is
	// read however large.
	big := Message("big", []byte("other"), 1)
	big.DecryptedMessageBytes = make([]byte, 3000)
	mustAppend(t, s, owner, big)
	res, err := s.ListMessages(ctx(t), owner, store.MessageQuery{GroupID: []byte("other"), Limit: 10, MaxBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "a page of one over MaxBytes", ids(res.Messages), []string{"big"})
	if !res.Full {
		t.Error("a page cut by MaxBytes does not say so")
	}
	res, err = s.ListMessages(ctx(t), owner, store.MessageQuery{GroupID: []byte("other"), Limit: 10, MaxBytes: 1 << 20})
	if err != nil || len(res.Messages) != 2 || res.Full {
		t.Errorf("a page within MaxBytes: %d messages, full %v, %v", len(res.Messages), res.Full, err)
	}
}

func testDeleteMessage(t *testing.T, s store.Store) {
	owner := Owner("delete")
	g := fullGroup("g")
	mustPut(t, s, owner, g)
	mustPut(t, s, owner, minimalGroup("other"))
	keep, target := Message("keep", g.Id, 1), FullMessage("target", g.Id, 2)
	mustAppend(t, s, owner, keep, target)

	refused := errors.New("refused by rule")
	var sawMsg *mb.GroupMessageSave
	var sawGroup *gb.GroupSave
	err := s.DeleteMessage(ctx(t), owner, g.Id, target.Id, func(m *mb.GroupMessageSave, gr *gb.GroupSave) error {
		sawMsg, sawGroup = m, gr
		return refused
	})
	if !errors.Is(err, refused) {
		t.Fatalf("refused delete: %v; want the rule's error", err)
	}
	equal(t, "rule saw the message", sawMsg, target)
	equal(t, "rule saw the group", sawGroup, g)
	equal(t, "after refused delete", allMessages(t, s, owner, g.Id), []*mb.GroupMessageSave{keep, target})

	allow := func(*mb.GroupMessageSave, *gb.GroupSave) error { return nil }
	if err := s.DeleteMessage(ctx(t), owner, []byte("other"), target.Id, allow); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("delete through another group: %v; want ErrNotFound", err)
	}
	if err := s.DeleteMessage(ctx(t), owner, g.Id, target.Id, allow); err != nil {
		t.Fatalf("delete: %v", err)
	}
	equal(t, "after delete", allMessages(t, s, owner, g.Id), []*mb.GroupMessageSave{keep})
	if err := s.DeleteMessage(ctx(t), owner, g.Id, target.Id, allow); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("delete again: %v; want ErrNotFound", err)
	}
}

func allConsent(t *testing.T, s store.Store, owner string) []*cs.ConsentSave {
	t.Helper()
	out, err := s.ListConsent(ctx(t), owner, nil, 1_000_000)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func testConsentMerge(t *testing.T, s store.Store) {
	owner := Owner("consent")
	a := Consent("a", cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED, 100)
	b := Consent("b", cs.ConsentStateSave_CONSENT_STATE_SAVE_DENIED, 100)
	out, err := s.MergeConsent(ctx(t), owner, []*cs.ConsentSave{a, b})
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "first merge", out, []store.Outcome{store.Inserted, store.Inserted})

	newer := Consent("a", cs.ConsentStateSave_CONSENT_STATE_SAVE_DENIED, 101)
	equalTime := Consent("b", cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED, 100)
	older := Consent("b", cs.ConsentStateSave_CONSENT_STATE_SAVE_UNKNOWN, 99)
	// The same entity under another type is another record.
	otherType := Consent("a", cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED, 1)
	otherType.EntityType = cs.ConsentTypeSave_CONSENT_TYPE_SAVE_CONVERSATION_ID
	out, err = s.MergeConsent(ctx(t), owner, []*cs.ConsentSave{newer, equalTime, older, otherType})
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "second merge", out, []store.Outcome{store.Updated, store.Unchanged, store.Unchanged, store.Inserted})
	equal(t, "stored", allConsent(t, s, owner), []*cs.ConsentSave{otherType, newer, b})
}

func testListConsentPages(t *testing.T, s store.Store) {
	owner := Owner("consent-pages")
	var want []*cs.ConsentSave
	for i := range 7 {
		want = append(want, Consent(fmt.Sprintf("e%02d", i), cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED, int64(i)))
	}
	if _, err := s.MergeConsent(ctx(t), owner, want); err != nil {
		t.Fatal(err)
	}
	var got []*cs.ConsentSave
	var after *store.ConsentKey
	for range 5 {
		page, err := s.ListConsent(ctx(t), owner, after, 3)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, page...)
		if len(page) < 3 {
			break
		}
		last := page[len(page)-1]
		after = &store.ConsentKey{EntityType: last.EntityType, Entity: last.Entity}
	}
	equal(t, "pages of 3", got, want)
}

func testActivateGroup(t *testing.T, s store.Store) {
	owner := Owner("activate")
	archived := fullGroup("r")
	if _, err := s.MergeGroups(ctx(t), owner, []*gb.GroupSave{archived}); err != nil {
		t.Fatal(err)
	}
	g, activated, err := s.ActivateGroup(ctx(t), owner, archived.Id)
	if err != nil || !activated {
		t.Fatalf("activate: %v, %v", activated, err)
	}
	equal(t, "activated group", g, archived)
	got, _ := s.GetGroup(ctx(t), owner, archived.Id)
	equal(t, "stored after activation", got, archived)
	if _, activated, err := s.ActivateGroup(ctx(t), owner, archived.Id); err != nil || activated {
		t.Errorf("activate again: %v, %v; want no change", activated, err)
	}
	mustAppend(t, s, owner, Message("after", archived.Id, 1))

	p := minimalGroup("p")
	p.MembershipState = pending
	mustPut(t, s, owner, p)
	if _, _, err := s.ActivateGroup(ctx(t), owner, p.Id); !errors.Is(err, store.ErrFailedPrecondition) {
		t.Errorf("activate a pending group: %v; want ErrFailedPrecondition", err)
	}
	if _, _, err := s.ActivateGroup(ctx(t), owner, []byte("missing")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("activate a missing group: %v; want ErrNotFound", err)
	}
}

func testMergeGroups(t *testing.T, s store.Store) {
	owner := Owner("merge")
	live := fullGroup("live")
	mustPut(t, s, owner, live)

	archivedLive := minimalGroup("live")
	archivedLive.MembershipState = gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_REJECTED
	archivedLive.LastMessageNs = ptr(live.GetLastMessageNs() + 1000)
	archivedLive.MutableMetadata = &gb.MutableMetadataSave{Attributes: map[string]string{"group_name": "old name"}}
	fresh := fullGroup("fresh")
	// ARCH-024: unknown creator (no metadata) and unknown adder stay so.
	anonymous := minimalGroup("anonymous")
	anonymous.MembershipState = gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_UNSPECIFIED

	out, err := s.MergeGroups(ctx(t), owner, []*gb.GroupSave{archivedLive, fresh, anonymous})
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "outcomes", out, []store.Outcome{store.Updated, store.Inserted, store.Inserted})

	wantLive := proto.Clone(live).(*gb.GroupSave)
	wantLive.LastMessageNs = archivedLive.LastMessageNs
	got, _ := s.GetGroup(ctx(t), owner, live.Id)
	equal(t, "ARCH-014 known group keeps its state, raises last_message_ns", got, wantLive)

	got, _ = s.GetGroup(ctx(t), owner, fresh.Id)
	equal(t, "ARCH-020 new group keeps archived metadata, Restored", got, RestoredForm(fresh))

	got, _ = s.GetGroup(ctx(t), owner, anonymous.Id)
	if got.Metadata != nil || got.AddedByInboxId != "" || got.MembershipState != restored {
		t.Errorf("ARCH-024 anonymous group: %v", got)
	}

	// An older last_message_ns leaves the stored one.
	older := minimalGroup("live")
	older.LastMessageNs = ptr(int64(1))
	out, err = s.MergeGroups(ctx(t), owner, []*gb.GroupSave{older, fresh, anonymous})
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "ARCH-016 second merge", out, []store.Outcome{store.Unchanged, store.Unchanged, store.Unchanged})
	got, _ = s.GetGroup(ctx(t), owner, live.Id)
	equal(t, "after older merge", got, wantLive)
}

func testOwnerIsolation(t *testing.T, s store.Store) {
	a, b := Owner("a"), Owner("b")
	g := fullGroup("shared-id")
	mustPut(t, s, a, g)
	msg := FullMessage("m", g.Id, 1)
	mustAppend(t, s, a, msg)
	consent := Consent("x", cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED, 5)
	if _, err := s.MergeConsent(ctx(t), a, []*cs.ConsentSave{consent}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MergeGroups(ctx(t), a, []*gb.GroupSave{fullGroup("restored")}); err != nil {
		t.Fatal(err)
	}

	if _, err := s.GetGroup(ctx(t), b, g.Id); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("B reads A's group: %v", err)
	}
	if gs, _ := s.ListGroups(ctx(t), b, nil, 100); len(gs) != 0 {
		t.Errorf("B lists %d of A's groups", len(gs))
	}
	if ms := allMessages(t, s, b, g.Id); len(ms) != 0 {
		t.Errorf("B lists %d of A's messages", len(ms))
	}
	if cs := allConsent(t, s, b); len(cs) != 0 {
		t.Errorf("B lists %d of A's consent records", len(cs))
	}
	if _, err := s.AppendMessages(ctx(t), b, []*mb.GroupMessageSave{Message("b-m", g.Id, 1)}, store.AppendOptions{}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("B appends to A's group: %v", err)
	}
	allow := func(*mb.GroupMessageSave, *gb.GroupSave) error { return nil }
	if err := s.DeleteMessage(ctx(t), b, g.Id, msg.Id, allow); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("B deletes A's message: %v", err)
	}
	if _, _, err := s.ActivateGroup(ctx(t), b, []byte("restored")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("B activates A's group: %v", err)
	}
	// B's own records under the same ids are B's alone.
	other := minimalGroup("shared-id")
	if created, err := s.PutGroup(ctx(t), b, other); err != nil || !created {
		t.Errorf("B puts its own group of the same id: %v, %v", created, err)
	}
	mustAppend(t, s, b, Message("m", other.Id, 99))
	if _, err := s.MergeConsent(ctx(t), b, []*cs.ConsentSave{Consent("x", cs.ConsentStateSave_CONSENT_STATE_SAVE_DENIED, 500)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MergeGroups(ctx(t), b, []*gb.GroupSave{minimalGroup("shared-id")}); err != nil {
		t.Fatal(err)
	}

	got, _ := s.GetGroup(ctx(t), a, g.Id)
	equal(t, "A's group", got, g)
	equal(t, "A's messages", allMessages(t, s, a, g.Id), []*mb.GroupMessageSave{msg})
	equal(t, "A's consent", allConsent(t, s, a), []*cs.ConsentSave{consent})
	r, _ := s.GetGroup(ctx(t), a, []byte("restored"))
	if r.GetMembershipState() != restored {
		t.Errorf("A's restored group is %v", r.GetMembershipState())
	}
}

func testSnapshotConsistent(t *testing.T, s store.Store) {
	owner := Owner("snap")
	mustPut(t, s, owner, minimalGroup("g"))
	mustAppend(t, s, owner, Message("before", []byte("g"), 1))
	if _, err := s.MergeConsent(ctx(t), owner, []*cs.ConsentSave{Consent("c", cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED, 1)}); err != nil {
		t.Fatal(err)
	}
	var groups, msgs, consent int
	err := s.Snapshot(ctx(t), owner, func(snap store.Snapshot) error {
		if err := snap.EachGroup(ctx(t), func(*gb.GroupSave) error { groups++; return nil }); err != nil {
			return err
		}
		// Writes committed after the snapshot began stay out of it.
		mustPut(t, s, owner, minimalGroup("g2"))
		mustAppend(t, s, owner, Message("after", []byte("g"), 2))
		if _, err := s.MergeConsent(ctx(t), owner, []*cs.ConsentSave{Consent("c", cs.ConsentStateSave_CONSENT_STATE_SAVE_DENIED, 2)}); err != nil {
			return err
		}
		if err := snap.EachMessage(ctx(t), store.MessageQuery{GroupID: []byte("g")}, func(*mb.GroupMessageSave) error { msgs++; return nil }); err != nil {
			return err
		}
		return snap.EachConsent(ctx(t), func(c *cs.ConsentSave) error {
			consent++
			if c.State != cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED {
				return fmt.Errorf("snapshot saw a later consent write: %v", c)
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if groups != 1 || msgs != 1 || consent != 1 {
		t.Errorf("snapshot saw %d groups, %d messages, %d consent; want 1 each", groups, msgs, consent)
	}
	if got := allMessages(t, s, owner, []byte("g")); len(got) != 2 {
		t.Errorf("after the snapshot: %d messages; want 2", len(got))
	}
}

func testSnapshotPages(t *testing.T, s store.Store) {
	owner := Owner("pages")
	n := 2*store.SnapshotPageSize + 17
	for i := range 3 {
		mustPut(t, s, owner, minimalGroup(fmt.Sprintf("g%d", i)))
	}
	// Equal send times across a page boundary: the cursor breaks ties by id.
	msgs := Messages("m", []byte("g1"), n, 0)
	for i, m := range msgs {
		m.SentAtNs = int64(i / 3)
	}
	mustAppend(t, s, owner, msgs...)
	var consent []*cs.ConsentSave
	for i := range n {
		consent = append(consent, Consent(fmt.Sprintf("e%06d", i), cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED, 1))
	}
	if _, err := s.MergeConsent(ctx(t), owner, consent); err != nil {
		t.Fatal(err)
	}
	err := s.Snapshot(ctx(t), owner, func(snap store.Snapshot) error {
		var groups []string
		if err := snap.EachGroup(ctx(t), func(g *gb.GroupSave) error { groups = append(groups, string(g.Id)); return nil }); err != nil {
			return err
		}
		equal(t, "groups", groups, []string{"g0", "g1", "g2"})
		i := 0
		if err := snap.EachMessage(ctx(t), store.MessageQuery{GroupID: []byte("g1")}, func(m *mb.GroupMessageSave) error {
			if i >= n || !proto.Equal(m, msgs[i]) {
				return fmt.Errorf("message %d: got %s", i, m.Id)
			}
			i++
			return nil
		}); err != nil {
			return err
		}
		if i != n {
			t.Errorf("EachMessage gave %d of %d", i, n)
		}
		start, end := int64(100), int64(200)
		w := 0
		if err := snap.EachMessage(ctx(t), store.MessageQuery{GroupID: []byte("g1"), StartNs: &start, EndNs: &end}, func(m *mb.GroupMessageSave) error {
			if m.SentAtNs <= start || m.SentAtNs > end {
				return fmt.Errorf("message sent at %d outside (%d, %d]", m.SentAtNs, start, end)
			}
			w++
			return nil
		}); err != nil {
			return err
		}
		if w != 300 {
			t.Errorf("window (100, 200] gave %d messages; want 300", w)
		}
		c := 0
		if err := snap.EachConsent(ctx(t), func(*cs.ConsentSave) error { c++; return nil }); err != nil {
			return err
		}
		if c != n {
			t.Errorf("EachConsent gave %d of %d", c, n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func testBulkAppend(t *testing.T, s store.Store) {
	owner := Owner("bulk")
	const total, batch = 100_000, 10_000
	mustPut(t, s, owner, minimalGroup("g"))
	for i := 0; i < total; i += batch {
		msgs := Messages(fmt.Sprintf("b%03d", i/batch), []byte("g"), batch, int64(i))
		out := mustAppend(t, s, owner, msgs...)
		for j, o := range out {
			if o != store.Inserted {
				t.Fatalf("message %d of batch %d: %v", j, i/batch, o)
			}
		}
	}
	n := 0
	var last int64 = -1
	err := s.Snapshot(ctx(t), owner, func(snap store.Snapshot) error {
		return snap.EachMessage(ctx(t), store.MessageQuery{GroupID: []byte("g")}, func(m *mb.GroupMessageSave) error {
			if m.SentAtNs < last {
				return fmt.Errorf("out of order at %d", n)
			}
			last = m.SentAtNs
			n++
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != total {
		t.Errorf("stored %d of %d messages", n, total)
	}
}

// Two writers appending the same ids at once: each id is stored once, by
// one of them, and neither fails (Postgres's fast path finds the other's
// insert and falls back; SQLite takes one writer at a time).
func testConcurrentAppends(t *testing.T, s store.Store) {
	owner := Owner("concurrent")
	mustPut(t, s, owner, minimalGroup("g"))
	const n = 2000
	results := make(chan []store.Outcome, 4)
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			out, err := s.AppendMessages(ctx(t), owner, Messages("m", []byte("g"), n, 0), store.AppendOptions{})
			results <- out
			errs <- err
		}()
	}
	inserted := 0
	for range 4 {
		if err := <-errs; err != nil {
			t.Errorf("concurrent append: %v", err)
		}
		for _, o := range <-results {
			if o == store.Inserted {
				inserted++
			}
		}
	}
	if inserted != n {
		t.Errorf("%d inserted outcomes for %d ids", inserted, n)
	}
	if got := allMessages(t, s, owner, []byte("g")); len(got) != n {
		t.Errorf("stored %d of %d", len(got), n)
	}
}
