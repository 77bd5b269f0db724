package transport

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
)

// flakyContent fails its first two Decode calls UNAVAILABLE, as a replica
// whose store is failing over does, and answers the third.
type flakyContent struct {
	cb.UnimplementedContentServiceServer
	calls atomic.Int32
}

func (f *flakyContent) Decode(context.Context, *cb.DecodeRequest) (*cb.DecodeResponse, error) {
	if f.calls.Add(1) <= 2 {
		return nil, status.Error(codes.Unavailable, "the store is unavailable; retry with backoff")
	}
	return &cb.DecodeResponse{}, nil
}

// flakyHealth always fails UNAVAILABLE: a method the retry policy does
// not name is not retried.
type flakyHealth struct {
	healthpb.UnimplementedHealthServer
	calls atomic.Int32
}

func (f *flakyHealth) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	f.calls.Add(1)
	return nil, status.Error(codes.Unavailable, "down")
}

// TestRetryServiceConfig: a client dialled WithRetries sends an
// idempotent call again after UNAVAILABLE and gets the answer; a method
// the config does not name is tried once.
func TestRetryServiceConfig(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	content, hc := &flakyContent{}, &flakyHealth{}
	cb.RegisterContentServiceServer(g, content)
	healthpb.RegisterHealthServer(g, hc)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	opts, err := DialOptions(ClientOptions{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(lis.Addr().String(), append(opts, WithRetries())...)
	if err != nil {
		t.Fatalf("the retry service config does not parse: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := cb.NewContentServiceClient(conn).Decode(t.Context(), &cb.DecodeRequest{}); err != nil {
		t.Errorf("Decode after two UNAVAILABLE: %v; want the third attempt's answer", err)
	}
	if n := content.calls.Load(); n != 3 {
		t.Errorf("Decode was attempted %d times; want 3", n)
	}
	if _, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("Check: %v; want UNAVAILABLE", err)
	}
	if n := hc.calls.Load(); n != 1 {
		t.Errorf("a method the config does not name was attempted %d times; want 1", n)
	}
}
