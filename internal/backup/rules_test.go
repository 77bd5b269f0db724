package backup

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/archive/archivetest"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// TestARCH009_MessageEligibleAtTheExportInstant: a message whose expiry
// is the export instant has expired (the reference drops messages
// "already expired at export time"); one a nanosecond later has not.
func TestARCH009_MessageEligibleAtTheExportInstant(t *testing.T) {
	app := mb.GroupMessageKindSave_GROUP_MESSAGE_KIND_SAVE_APPLICATION
	for _, c := range []struct {
		name         string
		m            *mb.GroupMessageSave
		disappearing bool
		want         bool
	}{
		{"no expiry", &mb.GroupMessageSave{Kind: app}, false, true},
		{"expires at the export instant", &mb.GroupMessageSave{Kind: app, ExpiresAtNs: ptr(exportAt)}, false, false},
		{"expires a nanosecond later", &mb.GroupMessageSave{Kind: app, ExpiresAtNs: ptr(exportAt + 1)}, false, true},
		{"expires later, disappearing excluded", &mb.GroupMessageSave{Kind: app, ExpiresAtNs: ptr(exportAt + 1)}, true, false},
		{"no expiry, disappearing excluded", &mb.GroupMessageSave{Kind: app}, true, true},
		{"a membership change", &mb.GroupMessageSave{Kind: mb.GroupMessageKindSave_GROUP_MESSAGE_KIND_SAVE_MEMBERSHIP_CHANGE}, false, false},
	} {
		if got := MessageEligible(c.m, exportAt, c.disappearing); got != c.want {
			t.Errorf("%s: eligible %v; want %v", c.name, got, c.want)
		}
	}
}

// TestARCH007_WindowOfOneInstant: a window whose start is its end is a
// window (one instant); only a start after the end is refused.
func TestARCH007_WindowOfOneInstant(t *testing.T) {
	if _, err := Resolve(&ds.ArchiveOptions{StartNs: ptr(int64(5)), EndNs: ptr(int64(5))}); err != nil {
		t.Errorf("start == end: %v", err)
	}
	var oe *OptionsError
	if _, err := Resolve(&ds.ArchiveOptions{StartNs: ptr(int64(6)), EndNs: ptr(int64(5))}); !errors.As(err, &oe) || !strings.Contains(err.Error(), "start_ns") {
		t.Errorf("start after end: %v", err)
	}
}

// TestExportOfManyBatches: an export of more messages than one of its
// write batches holds writes every one of them (the reader and writer
// hand batches over; the last is not the only one written).
func TestExportOfManyBatches(t *testing.T) {
	s := enginetest.SQLite(t)
	owner := storetest.Owner("batches")
	g := storetest.FullGroup("g")
	if _, err := s.PutGroup(t.Context(), owner, g); err != nil {
		t.Fatal(err)
	}
	const n = 3*exportBatchElements + 5
	if _, err := s.AppendMessages(t.Context(), owner, storetest.Messages("m", g.Id, n, 1000), store.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	data, counts := export(t, s, owner, nil)
	_, els := elements(t, data)
	msgs := 0
	for _, el := range els {
		if el.GetGroupMessage() != nil {
			msgs++
		}
	}
	if counts.Messages != n || msgs != n {
		t.Errorf("exported %d messages, %d in the archive; want %d", counts.Messages, msgs, n)
	}
}

// TestImportCountsSkippedRecords: a record of an element kind this
// server does not know is skipped and counted, and the import goes on.
func TestImportCountsSkippedRecords(t *testing.T) {
	s := enginetest.SQLite(t)
	future := &ds.BackupElement{}
	future.ProtoReflect().SetUnknown(protowire.AppendBytes(protowire.AppendTag(nil, 99, protowire.BytesType), []byte("a later kind")))
	data, err := archivetest.Counter(key, [12]byte{3}, metaEl(), future, groupEl("g1"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Import(t.Context(), s, storetest.Owner("skip"), key, bytes.NewReader(data), ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Skipped != 1 || res.Records != 3 || res.Groups.Inserted != 1 {
		t.Errorf("import %+v; want 3 records, 1 skipped, the group inserted", res)
	}
}

// TestUnexportableErrorNamesTheRecord: a consent record is named by its
// entity, quoted; a group or message by its id in hex.
func TestUnexportableErrorNamesTheRecord(t *testing.T) {
	inner := errors.New("the rule")
	if got := (&UnexportableError{Kind: "consent", ID: []byte("inbox-1"), Err: inner}).Error(); got != `consent record for "inbox-1" cannot be exported: the rule` {
		t.Errorf("consent: %q", got)
	}
	if got := (&UnexportableError{Kind: "group", ID: []byte{0xab, 0xcd}, Err: inner}).Error(); got != "group abcd cannot be exported: the rule" {
		t.Errorf("group: %q", got)
	}
}
