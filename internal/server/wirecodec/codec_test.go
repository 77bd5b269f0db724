package wirecodec

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
)

// TestExportChunkMarshalIsProto: the codec's copy-free marshalling of an
// Export chunk writes what proto.Marshal writes, for every size, and
// leaves every other message to the proto codec.
func TestExportChunkMarshalIsProto(t *testing.T) {
	c := NewCodec(nil)
	for _, m := range []proto.Message{
		&cb.ExportResponse{Payload: &cb.ExportResponse_Chunk{Chunk: nil}},
		&cb.ExportResponse{Payload: &cb.ExportResponse_Chunk{Chunk: []byte{7}}},
		&cb.ExportResponse{Payload: &cb.ExportResponse_Chunk{Chunk: bytes.Repeat([]byte{1}, 300<<10)}},
		&cb.ExportResponse{Payload: &cb.ExportResponse_Summary{Summary: &cb.ExportSummary{Messages: 3}}},
		&cb.ExportResponse{},
	} {
		want, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if b := got.Materialize(); !bytes.Equal(b, want) {
			t.Errorf("%T %d bytes: codec wrote %d bytes differing from proto.Marshal", m.(*cb.ExportResponse).GetPayload(), len(want), len(b))
		}
	}
}

// TestResponseMarshalIsProto: responses go out through the code
// vtprotobuf generated; what the codec writes, pooled or not, parses back
// to the response (internal/contentapi's FuzzMarshalVTMatchesProto holds
// that code to proto.Marshal for every decode outcome).
func TestResponseMarshalIsProto(t *testing.T) {
	c := NewCodec(nil)
	for _, n := range []int{0, 1, 1000} {
		resp := &cb.ListMessagesResponse{NextPageToken: "next"}
		for i := range n {
			resp.Messages = append(resp.Messages, &cb.StoredMessage{
				Message: &mb.GroupMessageSave{Id: []byte{byte(i)}, DecryptedMessageBytes: bytes.Repeat([]byte{2}, 100), SenderInboxId: "inbox"},
				Decoded: &cb.DecodeResponse{ContentType: "xmtp.org/text:1.0",
					Result: &cb.DecodeResponse_Content{Content: &cb.Content{Value: &cb.Content_Text{Text: "hello"}}}},
			})
		}
		got, err := c.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		b := got.Materialize()
		got.Free()
		var back cb.ListMessagesResponse
		if err := proto.Unmarshal(b, &back); err != nil {
			t.Fatalf("%d messages: the codec's bytes do not parse: %v", n, err)
		}
		if !proto.Equal(&back, resp) || len(b) != proto.Size(resp) {
			t.Fatalf("%d messages: the codec's %d bytes are not the response (%d bytes)", n, len(b), proto.Size(resp))
		}
	}
}
