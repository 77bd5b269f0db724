package server

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"

	"github.com/contentbackup/contentbackup/internal/eventually"
	"github.com/contentbackup/contentbackup/internal/server/httpjson"
)

// Identity first (issue 33, findings 2 and 3): an anonymous request costs
// the server its headers, on the gRPC listener and on HTTP/JSON, whatever
// its body declares or compresses. Each test sends the hostile request
// over TCP and asserts its answer and what the whole process allocated
// (server and client: an upper bound on the server's share).

// anonymousBudget is what 1,000 anonymous requests may allocate in all,
// client included: a few tens of kilobytes each. Before the tap handle a
// single one of these gzip requests expanded to megabytes of decoded
// elements (185 MB measured for one 2 KB request).
const anonymousBudget = 64 << 20

// gzipOf compresses b.
func gzipOf(b []byte) []byte {
	var z bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
	_, _ = zw.Write(b)
	_ = zw.Close()
	return z.Bytes()
}

// grpcFrame is one gRPC length-prefixed message, compressed when flag is 1.
func grpcFrame(flag byte, msg []byte) []byte {
	f := []byte{flag, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(f[1:], uint32(len(msg)))
	return append(f, msg...)
}

// batchBomb is a DecodeBatch request of n empty envelopes: two bytes on
// the wire each, an allocated message each once decoded.
func batchBomb(n int) []byte {
	one := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), nil)
	return bytes.Repeat(one, n)
}

func h2cClient() *http.Client {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: p, MaxConnsPerHost: 4}}
}

// TestIdentityFirstGRPCGzipBombs: 1,000 anonymous gzip requests of about
// 2 KB, each expanding to a DecodeBatch of a million envelopes, are
// UNAUTHENTICATED, and the server never decompresses one: the process
// allocates a bounded total.
func TestIdentityFirstGRPCGzipBombs(t *testing.T) {
	addr := serveTCP(t, Config{Auth: policyAuth(t, perimeterPolicy(true))}, nil)
	body := grpcFrame(1, gzipOf(batchBomb(1<<20)))
	if len(body) > 4<<10 {
		t.Fatalf("the bomb is %d bytes, want about 2 KB", len(body))
	}
	client := h2cClient()
	send := func() string {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+cb.ContentService_DecodeBatch_FullMethodName, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/grpc")
		req.Header.Set("Grpc-Encoding", "gzip")
		req.Header.Set("Te", "trailers")
		resp, err := client.Do(req)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if s := resp.Header.Get("Grpc-Status"); s != "" {
			return s
		}
		return resp.Trailer.Get("Grpc-Status")
	}
	send() // the connection, once
	want := strconv.Itoa(int(codes.Unauthenticated))
	bad, allocated := sendAnonymous(func() string {
		if got := send(); got != want {
			return got
		}
		return ""
	})
	if len(bad) > 0 {
		t.Errorf("%d of 1000 anonymous gzip requests answered %q, want grpc-status %s", len(bad), bad[0], want)
	}
	t.Logf("1000 anonymous gzip gRPC requests of %d bytes: %d KiB allocated in all", len(body), allocated>>10)
	if allocated > anonymousBudget {
		t.Errorf("1000 anonymous requests allocated %d MiB; want under %d MiB", allocated>>20, anonymousBudget>>20)
	}
}

// TestIdentityFirstHTTPGzipBombs: the same on the HTTP/JSON listener:
// 1,000 anonymous gzip JSON requests of about 2 KB, each a DecodeBatch of
// a million envelopes once expanded, are 401 unauthenticated before the
// transcoder reads a byte.
func TestIdentityFirstHTTPGzipBombs(t *testing.T) {
	_, url := httpServerWith(t, httpjson.Limits{MaxRecvBytes: 32 << 20})
	json := []byte(`{"encodedContents":[` + strings.Repeat(`{},`, 1<<20) + `{}]}`)
	body := gzipOf(json)
	if len(body) > 8<<10 {
		t.Fatalf("the bomb is %d bytes", len(body))
	}
	send := func() (int, string) {
		req, _ := http.NewRequest(http.MethodPost, url+cb.ContentService_DecodeBatch_FullMethodName, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Content-Encoding", "gzip")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return resp.StatusCode, string(b)
	}
	send()
	bad, allocated := sendAnonymous(func() string {
		if code, answer := send(); code != http.StatusUnauthorized || !strings.Contains(answer, `"code":"unauthenticated"`) {
			return fmt.Sprint(code, answer)
		}
		return ""
	})
	if len(bad) > 0 {
		t.Errorf("%d of 1000 anonymous gzip requests answered %q, want 401 unauthenticated", len(bad), bad[0])
	}
	t.Logf("1000 anonymous gzip JSON requests of %d bytes: %d KiB allocated in all", len(body), allocated>>10)
	if allocated > anonymousBudget {
		t.Errorf("1000 anonymous requests allocated %d MiB; want under %d MiB", allocated>>20, anonymousBudget>>20)
	}
}

// sendAnonymous makes 1,000 calls of refused from 8 callers at once and
// returns the unexpected answers (refused's non-empty results) and what
// the whole process allocated meanwhile.
func sendAnonymous(refused func() string) (bad []string, allocated uint64) {
	var mu sync.Mutex
	allocated = allocatedBytes(func() {
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				for i := w; i < 1000; i += 8 {
					if got := refused(); got != "" {
						mu.Lock()
						bad = append(bad, got)
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
	})
	return bad, allocated
}

// rawRequest opens a connection to url's host and writes a request line
// and headers, nothing of the body; it returns the connection.
func rawRequest(t *testing.T, url, method, path string, headers map[string]string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: test\r\n", method, path)
	for k, v := range headers {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(conn, b.String()); err != nil {
		t.Fatal(err)
	}
	return conn
}

// answerStatus reads the status code of the answer on conn, within d.
func answerStatus(conn net.Conn, d time.Duration) (int, error) {
	_ = conn.SetReadDeadline(time.Now().Add(d))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return 0, err
	}
	f := strings.Fields(line)
	if len(f) < 2 {
		return 0, fmt.Errorf("status line %q", line)
	}
	return strconv.Atoi(f[1])
}

// TestIdentityFirstHTTPDeclaredBodies: 500 anonymous connections, each
// declaring a 40 MB body and sending none of it, are each answered 401 at
// once and hold nothing: the listener never sizes a buffer by a declared
// length (each held 38 MB before, 11 GB for 500).
func TestIdentityFirstHTTPDeclaredBodies(t *testing.T) {
	_, url := httpServerWith(t, httpjson.Limits{MaxRecvBytes: 32 << 20})
	headers := map[string]string{"Content-Type": "application/json", "Content-Length": strconv.Itoa(40 << 20)}
	var conns []net.Conn
	allocated := allocatedBytes(func() {
		for range 500 {
			conns = append(conns, rawRequest(t, url, http.MethodPost, cb.ContentService_Decode_FullMethodName, headers))
		}
		for i, c := range conns {
			if code, err := answerStatus(c, 30*time.Second); code != http.StatusUnauthorized {
				t.Fatalf("connection %d declaring 40 MB: %d, %v; want 401 before its body", i, code, err)
			}
		}
	})
	t.Logf("500 anonymous connections declaring 40 MB each: %d KiB allocated in all", allocated>>10)
	if allocated > anonymousBudget {
		t.Errorf("500 declared bodies allocated %d MiB; want under %d MiB", allocated>>20, anonymousBudget>>20)
	}
}

// TestHTTPSlowBodyCutOff: an authenticated body that stops arriving is
// cut off once it falls behind its pace (grace, then a minimum rate), and
// its connection closed; one that keeps the pace is served.
func TestHTTPSlowBodyCutOff(t *testing.T) {
	_, url := httpServerWith(t, httpjson.Limits{MaxRecvBytes: httpTestMaxRecv, BodyGrace: 300 * time.Millisecond, MinBodyRate: 1000})
	conn := rawRequest(t, url, http.MethodPost, cb.ContentService_Decode_FullMethodName, map[string]string{
		"Content-Type": "application/json", "Content-Length": "100000", "Authorization": "Bearer " + aliceToken})
	if _, err := io.WriteString(conn, `{"encodedContent":"`); err != nil {
		t.Fatal(err)
	}
	// Nothing more: due by 300 ms + 20 B / 1000 B/s. The answer (or the
	// close) comes once it is overdue, not when the client gives up.
	start := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
	rest, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("reading the answer to a stalled body: %v (after %s)", err, time.Since(start))
	}
	if time.Since(start) >= time.Minute {
		t.Fatal("a stalled body was held for a minute")
	}
	t.Logf("stalled body: connection closed after %s with %q", time.Since(start).Round(time.Millisecond), firstLine(rest))
	if got := firstLine(rest); got != "HTTP/1.1 408 Request Timeout" || !bytes.Contains(rest, []byte(`"code":"deadline_exceeded"`)) {
		t.Errorf("a stalled body: %q, want 408 deadline_exceeded", rest)
	}
	// The same body, sent at once, is served.
	code, body := httpDo(t, http.MethodPost, url+cb.ContentService_Decode_FullMethodName, aliceToken, `{"encodedContent":"`+strings.Repeat("A", 100)+`"}`)
	if code == http.StatusRequestTimeout || code >= 500 {
		t.Errorf("a prompt body: %d %s", code, body)
	}
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(s)
}

// TestHTTPBodiesReadAtOnceAreBounded: past MaxBodies requests reading a
// body, the next is 503 unavailable before its body is read.
func TestHTTPBodiesReadAtOnceAreBounded(t *testing.T) {
	// A grace far longer than the wait below: on a loaded machine the two
	// slow bodies must still be holding their places when it ends.
	_, url := httpServerWith(t, httpjson.Limits{MaxRecvBytes: httpTestMaxRecv, MaxBodies: 2, MaxBodiesPerCaller: 2, BodyGrace: 2 * time.Minute, MinBodyRate: 1})
	headers := map[string]string{"Content-Type": "application/json", "Content-Length": "1000", "Authorization": "Bearer " + aliceToken}
	var code int
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		// Slow bodies hold the places: one more each round, as a probe
		// let in before one reached the door had it refused.
		rawRequest(t, url, http.MethodPost, cb.ContentService_Decode_FullMethodName, headers)
		// Another caller's: the first holds its own share, which is all.
		if code, _ = httpDo(t, http.MethodPost, url+cb.ContentService_Decode_FullMethodName, opsToken, `{}`); code == http.StatusServiceUnavailable {
			break
		}
	}
	if code != http.StatusServiceUnavailable {
		t.Errorf("a third body while two are read: %d, want 503", code)
	}
}

// TestHTTPStrictRequests: what a curl user gets wrong is refused with the
// right status and a message naming it (issue 33, finding 10), on the RPC
// paths and the REST paths alike.
func TestHTTPStrictRequests(t *testing.T) {
	_, url := httpServer(t)
	decode := url + cb.ContentService_Decode_FullMethodName
	do := func(method, target, contentType, body string) (int, string) {
		req, _ := http.NewRequest(method, target, strings.NewReader(body))
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		req.Header.Set("Authorization", "Bearer "+aliceToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	cases := []struct {
		name, method, target, contentType, body string
		status                                  int
		says                                    string
	}{
		{"a misspelled field", http.MethodPost, decode, "application/json", `{"encodedContnet":{}}`, 400, "encodedContnet"},
		{"an empty body", http.MethodPost, decode, "application/json", ``, 400, "empty"},
		{"no Content-Type", http.MethodPost, decode, "", `{}`, 415, "Content-Type"},
		{"a Content-Type nobody serves", http.MethodPost, decode, "text/plain", `{}`, 415, "Content-Type"},
		{"a REST path with a Content-Type nobody serves", http.MethodPost, url + "/v1/content:decode", "text/plain", `{}`, 415, "Content-Type"},
		{"invalid UTF-8 in the path", http.MethodGet, url + "/v1/owners/%ff/groups", "", ``, 400, "UTF-8"},
		{"invalid UTF-8 in the query", http.MethodGet, url + "/v1/owners/alice/groups?page_size=%ff", "", ``, 400, "UTF-8"},
		{"a query parameter overriding the path", http.MethodGet, url + "/v1/owners/alice/groups?owner=bob", "", ``, 400, "owner"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := do(c.method, c.target, c.contentType, c.body)
			if code != c.status || !strings.Contains(body, c.says) || !strings.Contains(body, `"code":`) {
				t.Errorf("%s: %d %s; want %d naming %q", c.name, code, body, c.status, c.says)
			}
		})
	}
}

// TestHTTPMessageOverTheLimitIs413: a JSON body under the listener's
// limit whose message, once transcoded, is over the gRPC message limit
// is 413 resource_exhausted, as any body past the limit is (it was 429,
// which tells a client to retry the same body later).
func TestHTTPMessageOverTheLimitIs413(t *testing.T) {
	_, url := httpServer(t)
	payload := base64.StdEncoding.EncodeToString(make([]byte, httpTestMaxRecv+(64<<10)))
	body := `{"encodedContent":"` + payload + `"}`
	if len(body) >= httpTestMaxBody {
		t.Fatalf("the body is %d bytes, not under the listener's %d", len(body), httpTestMaxBody)
	}
	code, answer := httpDo(t, http.MethodPost, url+cb.ContentService_Decode_FullMethodName, aliceToken, body)
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(answer, `"code":"resource_exhausted"`) {
		t.Errorf("a message over the gRPC limit: %d %.200s; want 413 resource_exhausted", code, answer)
	}
	// Under both limits it is served.
	if code, answer := httpDo(t, http.MethodPost, url+cb.ContentService_Decode_FullMethodName, aliceToken, `{"encodedContent":"`+base64.StdEncoding.EncodeToString(textEnvelope(t, "x"))+`"}`); code != http.StatusOK {
		t.Errorf("a small message: %d %.200s", code, answer)
	}
}

// TestHTTPOneErrorShape: an error on a REST path has the shape an error
// on an RPC path has, Connect's, with its string code: a curl user reads
// one shape (REST errors carried google.rpc.Status's numeric code).
func TestHTTPOneErrorShape(t *testing.T) {
	_, url := httpServer(t)
	for name, c := range map[string]struct {
		method, path, body string
		status             int
		code               string
	}{
		"REST, another owner's groups": {http.MethodGet, "/v1/owners/bob/groups", "", http.StatusForbidden, "permission_denied"},
		"REST, a bad page size":        {http.MethodGet, "/v1/owners/alice/groups?page_size=-1", "", http.StatusBadRequest, "invalid_argument"},
		"REST, a backup not there":     {http.MethodGet, "/v1/owners/alice/backups/" + strings.Repeat("0", 32), "", http.StatusNotImplemented, ""},
		"RPC, another owner's groups":  {http.MethodPost, cb.ConversationService_ListGroups_FullMethodName, `{"owner":"bob"}`, http.StatusForbidden, "permission_denied"},
	} {
		t.Run(name, func(t *testing.T) {
			code, body := httpDo(t, c.method, url+c.path, aliceToken, c.body)
			if c.code == "" {
				// Whatever the status, the shape.
				c.status, c.code = code, ""
			}
			var e struct {
				Code    any    `json:"code"`
				Message string `json:"message"`
			}
			if err := json.Unmarshal([]byte(body), &e); err != nil {
				t.Fatalf("%d %q: not JSON: %v", code, body, err)
			}
			s, ok := e.Code.(string)
			if code != c.status || !ok || c.code != "" && s != c.code || e.Message == "" {
				t.Errorf("%d %s; want %d with a string code %q and a message", code, body, c.status, c.code)
			}
		})
	}
}

// TestHTTPRefusalAnsweredAtOnce (issue 47, finding 5): a request the
// door refuses before reading its body is answered and its connection
// closed while the caller still owes the body it declared; before, Go's
// server first read the rest of a small body, with no deadline, so an
// anonymous caller that declared 100 bytes and sent none was never
// answered and held a descriptor as long as it liked.
func TestHTTPRefusalAnsweredAtOnce(t *testing.T) {
	_, url := httpServerWith(t, httpjson.Limits{MaxRecvBytes: httpTestMaxRecv, MaxBodies: 1, MaxBodiesPerCaller: 1, BodyGrace: 2 * time.Minute, MinBodyRate: 1})
	// One slow authenticated body holds the only body place.
	held := rawRequest(t, url, http.MethodPost, cb.ContentService_Decode_FullMethodName, map[string]string{
		"Content-Type": "application/json", "Content-Length": "1000", "Authorization": "Bearer " + aliceToken})
	_ = held
	cases := []struct {
		name    string
		headers map[string]string
		status  int
	}{
		{"anonymous", map[string]string{"Content-Type": "application/json", "Content-Length": "100"}, http.StatusUnauthorized},
		{"a bad token", map[string]string{"Content-Type": "application/json", "Content-Length": "100", "Authorization": "Bearer nope"}, http.StatusUnauthorized},
		{"a type nobody serves", map[string]string{"Content-Type": "text/plain", "Content-Length": "100", "Authorization": "Bearer " + aliceToken}, http.StatusUnsupportedMediaType},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conn := rawRequest(t, url, http.MethodPost, cb.ContentService_Decode_FullMethodName, c.headers)
			// The body is never sent. The answer and the close come at
			// once; a minute is only how long the test waits for them.
			_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
			answer, err := io.ReadAll(conn)
			if err != nil {
				t.Fatalf("no answer while the declared body is owed: %v", err)
			}
			if want := fmt.Sprintf("HTTP/1.1 %d ", c.status); !strings.HasPrefix(firstLine(answer), want) {
				t.Errorf("answered %q, want %s", firstLine(answer), want)
			}
		})
	}
	// The place is held: another caller's body is refused 503, and that
	// refusal too is answered while its body is owed.
	var status string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		conn := rawRequest(t, url, http.MethodPost, cb.ContentService_Decode_FullMethodName, map[string]string{
			"Content-Type": "application/json", "Content-Length": "100", "Authorization": "Bearer " + opsToken})
		_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
		answer, err := io.ReadAll(conn)
		if err != nil {
			t.Fatalf("no answer to a body past the places: %v", err)
		}
		if status = firstLine(answer); strings.HasPrefix(status, "HTTP/1.1 503 ") {
			break
		}
	}
	if !strings.HasPrefix(status, "HTTP/1.1 503 ") {
		t.Errorf("a body past the places: %q, want 503", status)
	}
}

// TestHTTPBodyPlacesPerCaller (issue 47, finding 6): one principal, of
// whatever scope, holds at most its share of the places for bodies being
// read; past it its next body is 429 before a byte is read, while
// another principal's call is served.
func TestHTTPBodyPlacesPerCaller(t *testing.T) {
	_, url := httpServerWith(t, httpjson.Limits{MaxRecvBytes: httpTestMaxRecv, MaxBodies: 4, MaxBodiesPerCaller: 2, BodyGrace: 2 * time.Minute, MinBodyRate: 1})
	slow := map[string]string{"Content-Type": "application/json", "Content-Length": "1000", "Authorization": "Bearer " + aliceToken}
	var code int
	var body string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		// Slow bodies hold the caller's places. A probe let in before a
		// slow body reached the door took a place for a moment, and that
		// slow body was refused; so each round adds one, until two hold.
		rawRequest(t, url, http.MethodPost, cb.ContentService_Decode_FullMethodName, slow)
		if code, body = httpDo(t, http.MethodPost, url+cb.ContentService_Decode_FullMethodName, aliceToken, `{}`); code == http.StatusTooManyRequests {
			break
		}
	}
	if code != http.StatusTooManyRequests || !strings.Contains(body, "resource_exhausted") {
		t.Errorf("a third body of the caller holding two: %d %s, want 429 resource_exhausted", code, body)
	}
	// Another principal still has places.
	if code, body := httpDo(t, http.MethodPost, url+cb.ContentService_Decode_FullMethodName, opsToken, `{}`); code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests {
		t.Errorf("another principal's call while the first holds its share: %d %s", code, body)
	}
}

// TestHTTPThousandAnonymousTricklers (issue 47, finding 5, the figure in
// RELIABILITY.md): 1,000 anonymous requests at once that each declare a
// 100-byte body and never send it are all answered 401, and once their
// clients hang up the server's descriptors are back where they were;
// before, none was answered and each held a descriptor.
func TestHTTPThousandAnonymousTricklers(t *testing.T) {
	_, url := httpServer(t)
	fds := func() int {
		entries, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatalf("counting descriptors: %v", err)
		}
		return len(entries)
	}
	idle := fds()
	const callers = 1000
	start := time.Now()
	var wg sync.WaitGroup
	var answered atomic.Int32
	var slowest atomic.Int64
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			sent := time.Now()
			fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n", cb.ContentService_Decode_FullMethodName)
			_ = conn.SetReadDeadline(time.Now().Add(2 * time.Minute))
			answer, err := io.ReadAll(conn)
			if err == nil && strings.HasPrefix(firstLine(answer), "HTTP/1.1 401 ") {
				answered.Add(1)
				took := int64(time.Since(sent))
				for old := slowest.Load(); took > old && !slowest.CompareAndSwap(old, took); old = slowest.Load() {
				}
			}
		}()
	}
	wg.Wait()
	if n := answered.Load(); n != callers {
		t.Fatalf("%d of %d anonymous tricklers answered 401", n, callers)
	}
	eventually.True(t, 30*time.Second, func() bool { return fds() <= idle+50 },
		func() string {
			return fmt.Sprintf("%d descriptors open after the tricklers hung up, %d before", fds(), idle)
		})
	t.Logf("%d anonymous requests owing their bodies: all answered 401 in %s (the slowest %s); descriptors %d before, %d after",
		callers, time.Since(start).Round(time.Millisecond), time.Duration(slowest.Load()).Round(time.Millisecond), idle, fds())
}
