// Package benchrows makes the messages the scale benchmarks store: 1 KiB
// text envelopes with the ids and fields a real message has, fed to
// Postgres' COPY FROM without being held in memory.
package benchrows

import (
	"bytes"
	"encoding/binary"
	"strings"

	"google.golang.org/protobuf/proto"

	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	"github.com/contentbackup/contentbackup/internal/store"
)

// Content is a 1 KiB text envelope.
func Content() []byte {
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 30)
	ec := &mc.EncodedContent{Type: &mc.ContentTypeId{AuthorityId: "xmtp.org", TypeId: "text", VersionMajor: 1},
		Parameters: map[string]string{"encoding": "UTF-8"}}
	head, _ := proto.Marshal(ec)
	ec.Content = []byte(text[:1024-len(head)-3])
	b, _ := proto.Marshal(ec)
	return b
}

// Message is the i-th message of group, holding body.
func Message(i int, group, body []byte) *mb.GroupMessageSave {
	id := make([]byte, 32)
	binary.BigEndian.PutUint64(id, uint64(i))
	copy(id[8:], group)
	return &mb.GroupMessageSave{
		Id: id, GroupId: group, DecryptedMessageBytes: body, SentAtNs: 1_700_000_000_000_000_000 + int64(i),
		Kind: mb.GroupMessageKindSave_GROUP_MESSAGE_KIND_SAVE_APPLICATION, SenderInstallationId: bytes.Repeat([]byte{7}, 32),
		SenderInboxId: strings.Repeat("ab", 32), DeliveryStatus: mb.DeliveryStatusSave_DELIVERY_STATUS_SAVE_PUBLISHED,
		AuthorityId: "xmtp.org", ContentType: "text", VersionMajor: 1, ExpiryKnown: proto.Bool(true),
	}
}

// CopyColumns are the messages table's columns, owner first, for COPY.
var CopyColumns = func() []string {
	cols := []string{"owner"}
	for _, c := range strings.Split(store.MessageInsertColumns, ",") {
		cols = append(cols, strings.TrimSpace(c))
	}
	return cols
}()

// Rows feeds COPY FROM the messages 1..N of Owner's Group: rows as a
// bulk load writes them, stamped with change sequence 0 (as rows stored
// before changes were tracked).
type Rows struct {
	Owner string
	Group []byte
	Body  []byte
	N     int
	i     int
}

func (r *Rows) Next() bool { r.i++; return r.i <= r.N }
func (r *Rows) Values() ([]any, error) {
	return append([]any{r.Owner}, store.MessageInsertArgs(Message(r.i, r.Group, r.Body), false, 0)...), nil
}
func (r *Rows) Err() error { return nil }
