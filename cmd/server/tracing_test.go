package main

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/eventually"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// collector is an OTLP trace receiver that keeps the span names it gets.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	names map[string]bool
}

func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				c.names[sp.GetName()] = true
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (c *collector) has(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.names[name]
}

// TestBinaryTracing: with an OTLP endpoint configured, the server sends a
// span for each call and for the Postgres queries under it.
func TestBinaryTracing(t *testing.T) {
	col := &collector{names: map[string]bool{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(g, col)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)

	dataDir := t.TempDir()
	srv := serveIn(t, "LISTEN_ADDR=127.0.0.1:0", "METRICS_ADDR=", "LOG_FORMAT=json", "DATA_DIR="+dataDir,
		"DATABASE_URL="+storetest.NewPostgresDatabase(t), "OTEL_EXPORTER_OTLP_ENDPOINT="+lis.Addr().String(), "OTEL_EXPORTER_OTLP_INSECURE=true")
	addr, logs := srv.addr, srv.logs
	conv := cb.NewConversationServiceClient(dialToken(t, addr, filepath.Join(dataDir, "dev-token")))
	if _, err := conv.PutGroup(t.Context(), &cb.PutGroupRequest{Owner: "o", Group: storetest.FullGroup("g")}); err != nil {
		t.Fatal(err)
	}
	// The batcher exports every 5 s.
	eventually.True(t, 20*time.Second, func() bool {
		return col.has("contentbackup.v1.ConversationService/PutGroup") && col.has("INSERT") && col.has("pool.acquire")
	}, func() string { return fmt.Sprintf("spans received: %v\nserver log:\n%s", col.names, logs()) })
}
