package server

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
)

// TestExportChunkMarshalIsProto: the codec's copy-free marshalling of an
// Export chunk writes what proto.Marshal writes, for every size, and
// leaves every other message to the proto codec.
func TestExportChunkMarshalIsProto(t *testing.T) {
	c := newRequestCodec()
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
