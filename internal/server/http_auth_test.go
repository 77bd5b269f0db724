package server

import (
	"context"
	"encoding/base64"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/codec"
	"github.com/contentbackup/contentbackup/internal/server/httpjson"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/transport"
)

// TestHTTPJSONProvesACallOnce (issue 48): an HTTP/JSON call's credentials
// are verified once, at the door, and the gRPC call behind it uses that
// principal (its scope and owners still checked: a cross-owner call is
// refused as over gRPC); a gRPC call's once, on its headers (the tap).
// Before, an HTTP/JSON call verified a JWT twice, the door and the
// interceptor.
func TestHTTPJSONProvesACallOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	cfg := Config{Store: enginetest.SQLite(t), Auth: policyAuth(t, perimeterPolicy(true)), MaxRecvBytes: httpTestMaxRecv, Metrics: reg}
	srv := New(cfg, zap.NewNop())
	h, err := srv.HTTPHandlerWith(httpjson.Limits{MaxRecvBytes: httpTestMaxRecv})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	verified := func(where string) float64 {
		return series(t, reg, "contentbackup_auth_credentials_verified_total", map[string]string{"where": where}).GetCounter().GetValue()
	}
	ec, _ := codec.NewRegistry().Encode(codec.TypeText, "once")
	env, _ := proto.Marshal(ec)
	code, out := postJSON(t, hs.URL+"/contentbackup.v1.ContentService/Decode", aliceToken, map[string]any{"encodedContent": base64.StdEncoding.EncodeToString(env)})
	if code != http.StatusOK {
		t.Fatalf("Decode over HTTP/JSON: %d %v", code, out)
	}
	if got := []float64{verified("http"), verified("call"), verified("tap")}; got[0] != 1 || got[1] != 0 || got[2] != 0 {
		t.Errorf("one HTTP/JSON call verified credentials at the door %v, behind it %v, on a tap %v times; want 1, 0, 0", got[0], got[1], got[2])
	}
	// Behind the door the principal is alice's, and only hers: bob's
	// conversations are refused as over gRPC.
	code, out = postJSON(t, hs.URL+"/contentbackup.v1.ConversationService/ListGroups", aliceToken, map[string]any{"owner": "bob"})
	if code != http.StatusForbidden || out["code"] != connectCode(codes.PermissionDenied) {
		t.Errorf("alice naming bob over HTTP/JSON: %d %v", code, out)
	}
	if verified("call") != 0 {
		t.Errorf("the calls behind the door verified credentials %v times", verified("call"))
	}

	// Over gRPC, on the same server's metrics: once, on the headers.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis, time.Second) }()
	t.Cleanup(func() { cancel(); <-done })
	conn := dial(t, lis.Addr().String(), transport.ClientOptions{Insecure: true, Token: aliceToken})
	if _, err := cb.NewContentServiceClient(conn).Decode(t.Context(), &cb.DecodeRequest{EncodedContent: env}); err != nil {
		t.Fatal(err)
	}
	if verified("tap") != 1 || verified("call") != 0 {
		t.Errorf("one gRPC call: verified on the tap %v, in the interceptor %v times; want 1, 0", verified("tap"), verified("call"))
	}
}
