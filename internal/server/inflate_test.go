package server

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	_ "google.golang.org/grpc/encoding/gzip" // the client's gzip compressor

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/budget"
	"github.com/contentbackup/contentbackup/internal/server/httpjson"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
)

// The memory budget's room for a proven caller's compressed request is
// taken before a byte of it is inflated, on both listeners (issue 33:
// "nothing decompressed before it is charged"). Each test fills the
// server-wide pool with a hold of its own, sends the request compressed
// (refused RESOURCE_EXHAUSTED) and plain (served), then frees the hold and
// shows the compressed request served and every byte it charged given
// back.

// holdAllBut takes all of pool's capacity but room bytes.
func holdAllBut(t *testing.T, pool *budget.Pool, capacity, room int64) *budget.Call {
	t.Helper()
	h := pool.NewCall("test hold", capacity)
	if err := h.Charge(capacity - room); err != nil {
		t.Fatalf("the test's hold: %v", err)
	}
	return h
}

// waitPoolFree waits until nothing holds any of pool's capacity: a
// call's budget is released when gRPC reports the call ended, just after
// the client has its answer.
func waitPoolFree(t *testing.T, pool *budget.Pool, capacity int64) {
	t.Helper()
	for start := time.Now(); ; time.Sleep(5 * time.Millisecond) {
		probe := pool.NewCall("probe", capacity)
		err := probe.Charge(capacity)
		probe.Close()
		if err == nil {
			return
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("the memory budget is not given back after the call: %v", err)
		}
	}
}

func decodeBatchOf(t *testing.T, n int) *cb.DecodeBatchRequest {
	raw := textEnvelope(t, strings.Repeat("compressible text ", 50))
	req := &cb.DecodeBatchRequest{}
	for range n {
		req.EncodedContents = append(req.EncodedContents, raw)
	}
	return req
}

func TestCompressedGRPCRequestChargedBeforeInflating(t *testing.T) {
	const capacity = 64 << 20
	pool := budget.NewPool(capacity)
	conn := startTCP(t, Config{Pool: pool, MaxRecvBytes: 8 << 20, Limits: Limits{MemoryBytes: capacity}})
	c := cb.NewContentServiceClient(conn)
	ctx := context.Background()
	req := decodeBatchOf(t, 100) // about 100 KB, 2 KB compressed
	gz := grpc.UseCompressor("gzip")

	hold := holdAllBut(t, pool, capacity, 16<<10)
	_, err := c.DecodeBatch(ctx, req, gz)
	wantCode(t, err, codes.ResourceExhausted, "decompressing the request: the server memory budget")
	// The import stream's messages are inflated the same way.
	stream, err := cb.NewArchiveServiceClient(startTCP(t, Config{Store: enginetest.SQLite(t), Pool: pool})).Import(ctx, gz)
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.Send(&cb.ImportRequest{Payload: &cb.ImportRequest_Chunk{Chunk: bytes.Repeat([]byte{1}, 4096)}})
	_, err = stream.CloseAndRecv()
	wantCode(t, err, codes.ResourceExhausted, "decompressing the request")
	hold.Close()

	// Served, and every byte given back.
	resp, err := c.DecodeBatch(ctx, req, gz)
	if err != nil {
		t.Fatalf("a compressed request with room in the budget: %v", err)
	}
	if got := len(resp.GetResults()); got != 100 {
		t.Errorf("decoded %d of 100", got)
	}
	waitPoolFree(t, pool, capacity)

	// Past the message limit once inflated: refused while inflating,
	// named, and nothing left held.
	_, err = c.DecodeBatch(ctx, decodeBatchOf(t, 9000), gz) // about 9 MB
	wantCode(t, err, codes.ResourceExhausted, "decompresses past the message limit of 8388608 bytes")
	waitPoolFree(t, pool, capacity)
}

// TestCompressedGRPCRequestNotGzip: a message flagged compressed that is
// not gzip is the caller's error, INVALID_ARGUMENT, not INTERNAL.
func TestCompressedGRPCRequestNotGzip(t *testing.T) {
	addr := serveTCP(t, Config{}, nil)
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+cb.ContentService_DecodeBatch_FullMethodName,
		bytes.NewReader(grpcFrame(1, []byte("this is not gzip at all"))))
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Grpc-Encoding", "gzip")
	req.Header.Set("Te", "trailers")
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	resp, err := h2cClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	got := resp.Header.Get("Grpc-Status") + resp.Trailer.Get("Grpc-Status")
	msg := resp.Header.Get("Grpc-Message") + resp.Trailer.Get("Grpc-Message")
	if got != strconv.Itoa(int(codes.InvalidArgument)) || !strings.Contains(msg, "not a gzip stream") {
		t.Errorf("grpc-status %s %q; want INVALID_ARGUMENT naming gzip", got, msg)
	}
}

func TestCompressedHTTPRequestChargedBeforeInflating(t *testing.T) {
	const capacity = 64 << 20
	pool := budget.NewPool(capacity)
	_, url := httpServerWith(t, httpjson.Limits{MaxRecvBytes: httpTestMaxRecv, Memory: pool})
	body := []byte(`{"encodedContents":["` + "" + `"]}`)
	send := func(compressed bool) (int, string) {
		b := body
		req, _ := http.NewRequest(http.MethodPost, url+cb.ContentService_DecodeBatch_FullMethodName, nil)
		if compressed {
			b = gzipOf(body)
			req.Header.Set("Content-Encoding", "gzip")
		}
		req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+opsToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		answer, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(answer)
	}

	hold := holdAllBut(t, pool, capacity, 1<<20) // less than a message's room
	if code, answer := send(true); code != http.StatusTooManyRequests || !strings.Contains(answer, `"code":"resource_exhausted"`) ||
		!strings.Contains(answer, "memory budget") {
		t.Errorf("a compressed body with no room in the budget: %d %s; want 429 resource_exhausted naming the memory budget", code, answer)
	}
	if code, answer := send(false); code != http.StatusOK {
		t.Errorf("the same body uncompressed: %d %s; want 200", code, answer)
	}
	hold.Close()
	if code, answer := send(true); code != http.StatusOK {
		t.Errorf("a compressed body with room in the budget: %d %s; want 200", code, answer)
	}
	waitPoolFree(t, pool, capacity)
}
