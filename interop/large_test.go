package interop

import (
	"encoding/hex"
	"flag"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/codec"
	"github.com/contentbackup/contentbackup/internal/server"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
)

var largeMessages = flag.Int("interop.messages", 5000, "messages TestReferenceImportsOurLargeExport exports into the reference (make interop-large: 100,000)")

// TestReferenceImportsOurLargeExport: an owner of many messages across ten
// groups, exported over gRPC, imports in the reference with every message
// and its content's bytes as ours. CI runs it at 5,000 messages; make
// interop-large at 100,000, the figure RELIABILITY.md records.
func TestReferenceImportsOurLargeExport(t *testing.T) {
	st := enginetest.SQLite(t)
	conn := serve(t, server.Config{Store: st})
	arch := cb.NewArchiveServiceClient(conn)
	ctx := t.Context()
	owner := inboxID("large owner")
	reg := codec.NewRegistry()
	var groups []*gb.GroupSave
	for i := range 10 {
		g := proto.Clone(sentinelGroup).(*gb.GroupSave)
		g.Id = id32(fmt.Sprint("large group ", i))[:16]
		groups = append(groups, g)
		if _, err := st.PutGroup(ctx, owner, g); err != nil {
			t.Fatal(err)
		}
	}
	content := map[string]string{}
	var batch []*mb.GroupMessageSave
	flush := func() {
		if _, err := st.AppendMessages(ctx, owner, batch, store.AppendOptions{MostlyNew: true}); err != nil {
			t.Fatal(err)
		}
		batch = batch[:0]
	}
	for i := range *largeMessages {
		env, err := reg.Encode(codec.TypeText, fmt.Sprintf("message %d of a large export", i))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := proto.Marshal(env)
		m := messageOf(fmt.Sprint("large ", i), func(m *mb.GroupMessageSave) {})
		m.GroupId, m.DecryptedMessageBytes, m.SentAtNs = groups[i%len(groups)].Id, b, 1_700_000_000_000_000_000+int64(i)
		content[hex.EncodeToString(m.Id)] = hex.EncodeToString(env.GetContent())
		batch = append(batch, m)
		if len(batch) == 5000 {
			flush()
		}
	}
	if len(batch) > 0 {
		flush()
	}
	start := time.Now()
	data, err := exportBytes(arch, owner)
	if err != nil {
		t.Fatal(err)
	}
	exported := time.Since(start)
	imp := []*refImport{{archive: data}}
	start = time.Now()
	importEach(t, imp)
	if imp[0].failed() {
		t.Fatalf("the reference's import failed: %s%s", imp[0].err, imp[0].crashed)
	}
	t.Logf("%d messages: exported %d bytes in %s; the reference imported them in %s", *largeMessages, len(data), exported.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	got := 0
	for _, m := range imp[0].view.Messages {
		want, ok := content[m.ID]
		if !ok {
			continue
		}
		got++
		if m.Envelope.Content != want {
			t.Errorf("message %s: the reference holds other content bytes", m.ID)
		}
	}
	if got != *largeMessages {
		t.Errorf("the reference holds %d of %d messages", got, *largeMessages)
	}
}
