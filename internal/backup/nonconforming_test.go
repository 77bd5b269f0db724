package backup

import (
	"bytes"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// legacyStore holds records stored before the write path refused what
// the reference's import refuses, put through the store directly as an
// older server did: a group of a 15-byte id with two messages, a group
// with a lone half of the disappearing pair and one message, a consent
// record of type ADDRESS; beside them a conforming group, message and
// consent record.
func legacyStore(t *testing.T, s store.Store, owner string) (badID, lone, good *gb.GroupSave) {
	t.Helper()
	ctx := t.Context()
	good = storetest.MinimalGroup("good")
	badID = storetest.MinimalGroup("bad id")
	badID.Id = badID.Id[:15]
	lone = storetest.MinimalGroup("lone half")
	lone.MessageDisappearInNs = proto.Int64(3_600_000_000_000)
	for _, g := range []*gb.GroupSave{good, badID, lone} {
		if _, err := s.PutGroup(ctx, owner, g); err != nil {
			t.Fatal(err)
		}
	}
	msgs := []*mb.GroupMessageSave{storetest.Message("good 1", good.Id, 10), storetest.Message("bad 1", badID.Id, 11),
		storetest.Message("bad 2", badID.Id, 12), storetest.Message("lone 1", lone.Id, 13)}
	if _, err := s.AppendMessages(ctx, owner, msgs, store.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	address := storetest.Consent("0x0000000000000000000000000000000000000001", cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED, 5)
	//lint:ignore SA1019 the deprecated value is what an older server stored
	address.EntityType = cs.ConsentTypeSave_CONSENT_TYPE_SAVE_ADDRESS
	if _, err := s.MergeConsent(ctx, owner, []*cs.ConsentSave{address, storetest.Consent("inbox-a", cs.ConsentStateSave_CONSENT_STATE_SAVE_DENIED, 6)}); err != nil {
		t.Fatal(err)
	}
	return badID, lone, good
}

// TestExportNonconformingRecords: a stored record the reference's import
// refuses fails the export by default, naming it; EXCLUDE leaves it out
// (a group with its messages) and counts it; REPAIR writes the lone
// disappearing half dropped, as the reference's import would restore it,
// and leaves the rest out. Every archive written holds only records the
// write path accepts today (interop/TestExportModesRestoreInTheReference
// imports them in the reference itself).
func TestExportNonconformingRecords(t *testing.T) {
	forEachEngine(t, func(t *testing.T, s store.Store) {
		owner := storetest.Owner("legacy")
		badID, lone, good := legacyStore(t, s, owner)

		var buf bytes.Buffer
		_, err := Export(t.Context(), s, owner, key, nil, exportAt, &buf, ExportConfig{})
		var ue *UnexportableError
		if !errors.As(err, &ue) || ue.Kind != "group" || !bytes.Equal(ue.ID, badID.Id) {
			t.Fatalf("default export: %v; want an UnexportableError naming group %x", err, badID.Id)
		}

		for _, c := range []struct {
			mode       Nonconforming
			want       Counts
			wantGroups [][]byte
		}{
			// Excluded: the bad-id group and its 2 messages, the lone
			// group and its message, the ADDRESS consent.
			{ExcludeNonconforming, Counts{Groups: 1, Messages: 1, Consent: 1, Excluded: 6}, [][]byte{good.Id}},
			// Repaired: the lone group, kept with its message.
			{RepairNonconforming, Counts{Groups: 2, Messages: 2, Consent: 1, Excluded: 4, Repaired: 1}, [][]byte{good.Id, lone.Id}},
		} {
			buf.Reset()
			counts, err := Export(t.Context(), s, owner, key, nil, exportAt, &buf, ExportConfig{Nonconforming: c.mode})
			if err != nil {
				t.Fatalf("mode %d: %v", c.mode, err)
			}
			counts.ChangeSeq = 0 // the fixture's writes, not this test's concern
			if counts != c.want {
				t.Errorf("mode %d: counts %+v; want %+v", c.mode, counts, c.want)
			}
			_, els := elements(t, buf.Bytes())
			var groups [][]byte
			for _, el := range els {
				if g := el.GetGroup(); g != nil {
					groups = append(groups, g.Id)
					if g.MessageDisappearFromNs != nil || g.MessageDisappearInNs != nil {
						t.Errorf("mode %d: group %x written with a lone disappearing half", c.mode, g.Id)
					}
				}
				if m := el.GetGroupMessage(); m != nil && bytes.Equal(m.GroupId, badID.Id) {
					t.Errorf("mode %d: a message of the excluded group was written", c.mode)
				}
				if cr := el.GetConsent(); cr != nil && cr.EntityType != cs.ConsentTypeSave_CONSENT_TYPE_SAVE_INBOX_ID {
					t.Errorf("mode %d: consent of type %s written", c.mode, cr.EntityType)
				}
			}
			diff(t, "groups written", groups, c.wantGroups)
		}

		// Lint lists the three, with the repair where there is one.
		var found []Finding
		counts, err := Lint(t.Context(), s, owner, func(f Finding) error { found = append(found, f); return nil })
		if err != nil {
			t.Fatal(err)
		}
		if counts != (LintCounts{Groups: 3, Messages: 4, Consent: 2, Findings: 3, Repairable: 1}) {
			t.Errorf("lint counts %+v", counts)
		}
		byKind := map[string]Finding{}
		for _, f := range found {
			key := f.Kind
			if f.Kind == "group" {
				key += " " + string(f.ID)
			}
			byKind[key] = f
		}
		if f := byKind["group "+string(badID.Id)]; f.Field != "id" || f.Repair != "" || f.Messages != 2 {
			t.Errorf("the bad-id group's finding: %+v", f)
		}
		if f := byKind["group "+string(lone.Id)]; f.Field != "message_disappear_in_ns" || f.Repair == "" {
			t.Errorf("the lone group's finding: %+v", f)
		}
		//lint:ignore SA1019 the deprecated value is what the finding names
		if f := byKind["consent"]; f.Field != "entity_type" || f.ConsentType != cs.ConsentTypeSave_CONSENT_TYPE_SAVE_ADDRESS {
			t.Errorf("the consent finding: %+v", f)
		}
	})
}
