package server

import (
	"strings"
	"testing"

	"go.uber.org/zap"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/server/requestid"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/transport"
)

// TestRequestID: every call, refused or not, unary or streaming, gets a
// request id in its response headers and in the server's log line for it;
// a caller's own plain id is kept, anything else replaced.
func TestRequestID(t *testing.T) {
	var buf syncBuffer
	addr := serveTCP(t, Config{Store: enginetest.SQLite(t)}, zap.New(zapJSONCore(&buf)))
	conn := dial(t, addr, transport.ClientOptions{Insecure: true, Token: testAdminToken})
	c := cb.NewContentServiceClient(conn)

	var hdr metadata.MD
	if _, err := c.Decode(t.Context(), &cb.DecodeRequest{EncodedContent: textEnvelope(t, "x")}, grpc.Header(&hdr)); err != nil {
		t.Fatal(err)
	}
	id := hdr.Get(requestid.Header)
	if len(id) != 1 || len(id[0]) != 24 {
		t.Fatalf("a unary call's request id: %v", id)
	}
	ctx := metadata.AppendToOutgoingContext(t.Context(), requestid.Header, "client-trace.42")
	if _, err := c.Decode(ctx, &cb.DecodeRequest{EncodedContent: textEnvelope(t, "x")}, grpc.Header(&hdr)); err != nil || hdr.Get(requestid.Header)[0] != "client-trace.42" {
		t.Errorf("a caller's plain id: %v %v", hdr.Get(requestid.Header), err)
	}
	ctx = metadata.AppendToOutgoingContext(t.Context(), requestid.Header, "bad id\"}")
	if _, err := c.Decode(ctx, &cb.DecodeRequest{EncodedContent: textEnvelope(t, "x")}, grpc.Header(&hdr)); err != nil || strings.Contains(hdr.Get(requestid.Header)[0], "bad") {
		t.Errorf("a caller's unsafe id was kept: %v %v", hdr.Get(requestid.Header), err)
	}
	// Refused at the door (before its request is read), and streaming: a
	// refusal is a trailers-only answer, whose request id is its status's
	// google.rpc.RequestInfo.
	anon := cb.NewContentServiceClient(dial(t, addr, transport.ClientOptions{Insecure: true}))
	_, err := anon.Decode(t.Context(), &cb.DecodeRequest{})
	refused := ""
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.RequestInfo); ok {
			refused = info.GetRequestId()
		}
	}
	if status.Code(err) != codes.Unauthenticated || len(refused) != 24 {
		t.Fatalf("a refused call: %v, request id %q", err, refused)
	}
	stream, err := cb.NewArchiveServiceClient(conn).Export(t.Context(), &cb.ExportRequest{Owner: "o", Key: archiveKey})
	if err != nil {
		t.Fatal(err)
	}
	h, err := stream.Header()
	if err != nil || len(h.Get(requestid.Header)) != 1 {
		t.Errorf("a stream's request id: %v %v", h, err)
	}
	for err == nil {
		_, err = stream.Recv()
	}
	logs := buf.String()
	for _, want := range []string{id[0], "client-trace.42", refused, h.Get(requestid.Header)[0]} {
		if !strings.Contains(logs, `"request_id":"`+want+`"`) {
			t.Errorf("no log line carries request id %s", want)
		}
	}
}
