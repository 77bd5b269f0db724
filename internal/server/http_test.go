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
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	"github.com/contentbackup/contentbackup/internal/codec"
	"github.com/contentbackup/contentbackup/internal/server/httpjson"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
	"github.com/contentbackup/contentbackup/internal/transport"
)

// httpTestMaxRecv is the tests' HTTP listener's message limit, and
// httpTestMaxBody the most bytes of JSON one message may take.
const (
	httpTestMaxRecv = 1 << 20
	httpTestMaxBody = httpTestMaxRecv*3/2 + 4096
)

// httpServer is one server over gRPC and over HTTP/JSON (its HTTPHandler
// on a real listener), with the perimeter's policy.
func httpServer(t *testing.T) (grpcAddr, httpURL string) {
	t.Helper()
	return httpServerWith(t, httpjson.Limits{MaxRecvBytes: httpTestMaxRecv})
}

// httpServerWith is httpServer with the HTTP listener's limits.
func httpServerWith(t *testing.T, limits httpjson.Limits) (grpcAddr, httpURL string) {
	t.Helper()
	// One message limit for both listeners, as cmd/server gives them.
	cfg := Config{Store: enginetest.SQLite(t), Auth: policyAuth(t, perimeterPolicy(true)), MaxRecvBytes: limits.MaxRecvBytes}
	grpcAddr = serveTCP(t, cfg, nil)
	// A second Server over the same store for HTTP: the handler wraps a
	// grpc.Server, and each listener gets its own, as cmd/server's one
	// server gets both listeners.
	srv := New(cfg, zap.NewNop())
	h, err := srv.HTTPHandlerWith(limits)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(h)
	// As cmd/server's listener: HTTP/1.1, and HTTP/2 in clear (h2c) for
	// the client stream, which needs HTTP/2 end to end.
	hs.Config.Protocols = new(http.Protocols)
	hs.Config.Protocols.SetHTTP1(true)
	hs.Config.Protocols.SetUnencryptedHTTP2(true)
	hs.Config.MaxHeaderBytes = httpjson.MaxHeaderBytes
	hs.Start()
	t.Cleanup(hs.Close)
	return grpcAddr, hs.URL
}

// httpDo sends a request with token's credentials (none when empty), and
// body as JSON when there is one, and returns the answer's status and body.
func httpDo(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func postJSON(t *testing.T, url, token string, body any) (int, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	code, raw := httpDo(t, http.MethodPost, url, token, string(b))
	var out map[string]any
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		t.Fatalf("%s: not JSON (%d): %s", url, code, raw)
	}
	return code, out
}

// TestHTTPJSONDecodeAndPreview: Decode and Preview as plain JSON POSTs
// (the Connect protocol, as curl sends them), bytes as base64 per the
// protobuf JSON mapping, behind the same authentication.
func TestHTTPJSONDecodeAndPreview(t *testing.T) {
	_, url := httpServer(t)
	ec, _ := codec.NewRegistry().Encode(codec.TypeText, "hello over HTTP")
	envBytes, _ := proto.Marshal(ec)
	raw := base64.StdEncoding.EncodeToString(envBytes)
	code, out := postJSON(t, url+"/contentbackup.v1.ContentService/Decode", aliceToken, map[string]any{"encodedContent": raw, "preview": map[string]any{}})
	if code != http.StatusOK || out["content"].(map[string]any)["text"] != "hello over HTTP" || out["preview"].(map[string]any)["body"] != "hello over HTTP" {
		t.Fatalf("Decode over HTTP/JSON: %d %v", code, out)
	}
	code, out = postJSON(t, url+"/contentbackup.v1.ContentService/Preview", aliceToken, map[string]any{"encodedContent": raw, "options": map[string]any{"maxBodyBytes": 9}})
	p, _ := out["preview"].(map[string]any)
	if code != http.StatusOK || p["push"] != true || p["truncated"] != true || p["body"] != "hello…" {
		t.Fatalf("Preview over HTTP/JSON: %d %v", code, out)
	}
	// No credentials: the Connect error, unauthenticated.
	if code, out := postJSON(t, url+"/contentbackup.v1.ContentService/Decode", "", map[string]any{"encodedContent": raw}); code != http.StatusUnauthorized || out["code"] != "unauthenticated" {
		t.Errorf("no token: %d %v", code, out)
	}
}

// TestHTTPJSONRefusesAsGRPCDoes: a cross-owner call (alice's token naming
// bob) is refused over HTTP/JSON with the same code as over gRPC.
func TestHTTPJSONRefusesAsGRPCDoes(t *testing.T) {
	grpcAddr, url := httpServer(t)
	conn := dial(t, grpcAddr, transport.ClientOptions{Insecure: true, Token: aliceToken})
	_, err := cb.NewConversationServiceClient(conn).ListGroups(t.Context(), &cb.ListGroupsRequest{Owner: "bob"})
	grpcCode := status.Code(err)
	if grpcCode == codes.OK {
		t.Fatal("alice listed bob's groups over gRPC")
	}
	code, out := postJSON(t, url+"/contentbackup.v1.ConversationService/ListGroups", aliceToken, map[string]any{"owner": "bob"})
	if out["code"] != connectCode(grpcCode) {
		t.Errorf("over HTTP/JSON: %d %v; over gRPC %v", code, out, grpcCode)
	}
	if strings.Contains(fmt.Sprint(out["message"]), aliceToken) {
		t.Error("the error echoes the token")
	}
}

// connectCode is the Connect protocol's name of a gRPC code.
func connectCode(c codes.Code) string {
	s := c.String() // "PermissionDenied"
	var b strings.Builder
	for i, r := range s {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r | 0x20)
	}
	return b.String()
}

// TestHTTPJSONOversizedBodyRefusedUnread: a body declaring more than the
// limit is answered 413 before a byte of it is read: the client sends
// only its headers and a few bytes, and the answer comes at once.
func TestHTTPJSONOversizedBodyRefusedUnread(t *testing.T) {
	_, url := httpServer(t)
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /contentbackup.v1.ContentService/Decode HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"encodedContent\":\"", aliceToken, 1<<30)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer while the 1 GiB body was still unsent: %v", err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "resource_exhausted") {
		t.Errorf("oversized body: %d %s", resp.StatusCode, body)
	}
	// A body that says less and sends more is cut off at the limit.
	big := strings.Repeat("A", 2<<20)
	req, _ := http.NewRequest(http.MethodPost, url+"/contentbackup.v1.ContentService/Decode", io.MultiReader(strings.NewReader(`{"encodedContent":"`), strings.NewReader(big), strings.NewReader(`"}`)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	req.ContentLength = -1 // chunked: no length declared
	r2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Body.Close()
	// RELIABILITY.md: sending more than the limit is cut off there,
	// resource_exhausted (413).
	cut, _ := io.ReadAll(io.LimitReader(r2.Body, 1<<10))
	if r2.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(cut), "resource_exhausted") {
		t.Errorf("a chunked body over the limit: %d %s; want 413 resource_exhausted", r2.StatusCode, cut)
	}
}

// TestHTTPJSONServerStream: StreamMessages, a server stream, over the
// Connect protocol with JSON: enveloped messages, then the end-of-stream
// frame.
func TestHTTPJSONServerStream(t *testing.T) {
	grpcAddr, url := httpServer(t)
	conn := dial(t, grpcAddr, transport.ClientOptions{Insecure: true, Token: aliceToken})
	conv := cb.NewConversationServiceClient(conn)
	g := storetest.FullGroup("g")
	if _, err := conv.PutGroup(t.Context(), &cb.PutGroupRequest{Owner: "alice", Group: g}); err != nil {
		t.Fatal(err)
	}
	var msgs []*mb.GroupMessageSave
	for _, m := range storetest.Messages("m", g.Id, 3, 10) {
		m.SenderInboxId = "alice"
		msgs = append(msgs, m)
	}
	if _, err := conv.AppendMessages(t.Context(), &cb.AppendMessagesRequest{Owner: "alice", Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	reqJSON, _ := json.Marshal(map[string]any{"owner": "alice", "groupId": base64.StdEncoding.EncodeToString(g.Id)})
	var frame bytes.Buffer
	frame.WriteByte(0)
	binary.Write(&frame, binary.BigEndian, uint32(len(reqJSON)))
	frame.Write(reqJSON)
	req, _ := http.NewRequest(http.MethodPost, url+"/contentbackup.v1.ConversationService/StreamMessages", &frame)
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, end := 0, false
	for {
		var head [5]byte
		if _, err := io.ReadFull(resp.Body, head[:]); err != nil {
			break
		}
		body := make([]byte, binary.BigEndian.Uint32(head[1:]))
		if _, err := io.ReadFull(resp.Body, body); err != nil {
			t.Fatal(err)
		}
		if head[0]&2 != 0 { // end of stream
			end = true
			if bytes.Contains(body, []byte(`"error"`)) {
				t.Fatalf("stream ended in error: %s", body)
			}
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatal(err)
		}
		list, _ := m["messages"].([]any)
		got += len(list)
	}
	if resp.StatusCode != http.StatusOK || got != 3 || !end {
		t.Errorf("StreamMessages over Connect: status %d, %d messages, end frame %v", resp.StatusCode, got, end)
	}
}

// TestHTTPJSONOverMutualTLS: the HTTP/JSON listener with the gRPC
// listener's TLS (transport.ServerTLS): a client certificate proves its
// principal as over gRPC (the relay may list alice's groups, not carol's),
// and a certificate from another CA proves nobody.
func TestHTTPJSONOverMutualTLS(t *testing.T) {
	pk := newPKI(t)
	_, httpTLS, stop, err := transport.ServerTLS(t.Context(), transport.ServerFiles{CertFile: pk.serverCert, KeyFile: pk.serverKey,
		ClientCAFile: pk.caFile, ClientAuth: transport.VerifyIfGiven})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	srv := New(Config{Store: enginetest.SQLite(t), Auth: policyAuth(t, perimeterPolicy(true))}, zap.NewNop())
	h, err := srv.HTTPHandler(httpTestMaxRecv)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(h)
	hs.TLS = httpTLS
	hs.StartTLS()
	t.Cleanup(hs.Close)
	client := func(cert, key string) *http.Client {
		ct, err := transport.ClientTLS(transport.ClientOptions{CAFile: pk.caFile, CertFile: cert, KeyFile: key, ServerName: "localhost"})
		if err != nil {
			t.Fatal(err)
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: ct, ForceAttemptHTTP2: true}}
	}
	call := func(c *http.Client, owner string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, hs.URL+"/contentbackup.v1.ConversationService/ListGroups", strings.NewReader(`{"owner":"`+owner+`"}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	relay := client(pk.relayCert, pk.relayKey)
	if code, body := call(relay, "alice"); code != http.StatusOK {
		t.Errorf("relay lists alice's groups over HTTPS: %d %s", code, body)
	}
	if code, body := call(relay, "carol"); code == http.StatusOK || !strings.Contains(body, `"code"`) {
		t.Errorf("relay lists carol's groups: %d %s", code, body)
	}
	// Another CA's certificate proves nobody (the client does not even
	// offer it to a server asking for this CA's): unauthenticated.
	if code, body := call(client(pk.rogueCert, pk.rogueKey), "alice"); code != http.StatusUnauthorized || !strings.Contains(body, "unauthenticated") {
		t.Errorf("a certificate of another CA: %d %s", code, body)
	}
}

// TestHTTPRESTPaths: the REST bindings of google.api.http, authorized as
// the RPCs they stand for: GET a resource, POST a custom method.
func TestHTTPRESTPaths(t *testing.T) {
	_, url := httpServer(t)
	get := func(path, token string) (int, string) {
		return httpDo(t, http.MethodGet, url+path, token, "")
	}
	if code, body := get("/v1/owners/alice/groups", aliceToken); code != http.StatusOK {
		t.Errorf("GET alice's groups: %d %s", code, body)
	}
	if code, body := get("/v1/owners/bob/groups", aliceToken); code == http.StatusOK || !strings.Contains(body, "code") {
		t.Errorf("GET bob's groups as alice: %d %s", code, body)
	}
	ec, _ := codec.NewRegistry().Encode(codec.TypeText, "over REST")
	b, _ := proto.Marshal(ec)
	code, out := postJSON(t, url+"/v1/content:preview", aliceToken, map[string]any{"encodedContent": base64.StdEncoding.EncodeToString(b)})
	if p, _ := out["preview"].(map[string]any); code != http.StatusOK || p["body"] != "over REST" {
		t.Errorf("POST /v1/content:preview: %d %v", code, out)
	}
}

// TestHTTPConnectClientStreamImport: Import, a client stream, over the
// Connect protocol on HTTP/2 in clear (h2c) and on HTTP/1.1 (a client
// stream is half-duplex: the request body streams, then the answer), as a
// Connect client sends it: an archive exported from one server over gRPC,
// twice the HTTP listener's message limit (a stream is bounded message by
// message, not as one body), arrives whole in another over HTTP/JSON,
// chunk by chunk as base64, and what it inserted lists back. A chunk over
// the limit is RESOURCE_EXHAUSTED and imports nothing; naming an owner the
// principal does not hold is the same code as over gRPC, and writes
// nothing.
func TestHTTPConnectClientStreamImport(t *testing.T) {
	// The source: alice's group and 40 messages of 100 KiB that do not
	// compress, exported over gRPC.
	srcAddr, _ := httpServerWith(t, httpjson.Limits{MaxRecvBytes: DefaultMaxRecvBytes})
	src := dial(t, srcAddr, transport.ClientOptions{Insecure: true, Token: aliceToken})
	g := storetest.FullGroup("g")
	if _, err := cb.NewConversationServiceClient(src).PutGroup(t.Context(), &cb.PutGroupRequest{Owner: "alice", Group: g}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var msgs []*mb.GroupMessageSave
	for _, m := range storetest.Messages("m", g.Id, 40, 10) {
		data := make([]byte, 100<<10)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		m.DecryptedMessageBytes = envelope(t, mustEncodeEnvelope(t, codec.TypeAttachment, &codec.Attachment{MimeType: "application/octet-stream", Data: data}))
		m.SenderInboxId = "alice"
		msgs = append(msgs, m)
	}
	if _, err := cb.NewConversationServiceClient(src).AppendMessages(t.Context(), &cb.AppendMessagesRequest{Owner: "alice", Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	archive, _ := exportArchive(t, cb.NewArchiveServiceClient(src), "alice", nil)
	if len(archive) < 2*httpTestMaxBody {
		t.Fatalf("the archive is %d bytes, under twice the message limit", len(archive))
	}

	for _, proto := range []string{"h2c", "HTTP/1.1"} {
		t.Run(proto, func(t *testing.T) {
			importOverConnect(t, proto, g.Id, archive)
		})
	}
}

func mustEncodeEnvelope(t *testing.T, typ codec.TypeID, v any) *mc.EncodedContent {
	t.Helper()
	ec, err := codec.NewRegistry().Encode(typ, v)
	if err != nil {
		t.Fatal(err)
	}
	return ec
}

func importOverConnect(t *testing.T, proto string, groupID, archive []byte) {
	dstAddr, dstURL := httpServer(t)
	protocols := new(http.Protocols)
	if proto == "h2c" {
		protocols.SetUnencryptedHTTP2(true)
	} else {
		protocols.SetHTTP1(true)
	}
	client := &http.Client{Transport: &http.Transport{Protocols: protocols}}
	importer := connect.NewClient[cb.ImportRequest, cb.ImportResponse](client,
		dstURL+cb.ArchiveService_Import_FullMethodName, connect.WithProtoJSON())
	send := func(owner string, chunk int) (*cb.ImportResponse, error) {
		stream := importer.CallClientStream(t.Context())
		stream.RequestHeader().Set("Authorization", "Bearer "+aliceToken)
		msgs := []*cb.ImportRequest{{Payload: &cb.ImportRequest_Start{Start: &cb.ImportStart{Owner: owner, Key: archiveKey}}}}
		for rest := archive; len(rest) > 0; {
			n := min(len(rest), chunk)
			msgs = append(msgs, &cb.ImportRequest{Payload: &cb.ImportRequest_Chunk{Chunk: rest[:n]}})
			rest = rest[n:]
		}
		for _, m := range msgs {
			if err := stream.Send(m); err != nil {
				break // the server answered early; CloseAndReceive has why
			}
		}
		resp, err := stream.CloseAndReceive()
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	}
	conn := dial(t, dstAddr, transport.ClientOptions{Insecure: true, Token: aliceToken})
	groups := func(owner string) int {
		ops := cb.NewConversationServiceClient(dial(t, dstAddr, transport.ClientOptions{Insecure: true, Token: opsToken}))
		resp, err := ops.ListGroups(t.Context(), &cb.ListGroupsRequest{Owner: owner})
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.GetGroups())
	}

	// alice may not import into bob: the code gRPC gives.
	_, err := send("bob", 256<<10)
	_, grpcErr := importArchive(t, cb.NewArchiveServiceClient(conn), "bob", archiveKey, archive, 256<<10)
	if connect.CodeOf(err).String() != connectCode(status.Code(grpcErr)) || status.Code(grpcErr) != codes.PermissionDenied {
		t.Fatalf("import into bob over Connect: %v; over gRPC: %v", err, grpcErr)
	}
	if n := groups("bob"); n != 0 {
		t.Errorf("the refused import left bob with %d groups", n)
	}

	// One chunk over the message limit (as base64 JSON): refused before
	// it is buffered, nothing imported.
	if _, err := send("alice", 2*httpTestMaxBody); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Errorf("a chunk over the message limit: %v, want resource_exhausted", err)
	}
	if n := groups("alice"); n != 0 {
		t.Errorf("the refused chunk imported %d groups", n)
	}

	resp, err := send("alice", 256<<10)
	if err != nil {
		t.Fatalf("Import over Connect (%s): %v", proto, err)
	}
	if resp.GetGroups().GetInserted() != 1 || resp.GetMessages().GetInserted() != 40 {
		t.Errorf("Import over Connect: %v, want 1 group and 40 messages inserted", resp)
	}
	listed, token := 0, ""
	for {
		page, err := cb.NewConversationServiceClient(conn).ListMessages(t.Context(), &cb.ListMessagesRequest{Owner: "alice", GroupId: groupID, PageToken: token, PageSize: 5})
		if err != nil {
			t.Fatal(err)
		}
		listed += len(page.GetMessages())
		if token = page.GetNextPageToken(); token == "" {
			break
		}
	}
	if listed != 40 {
		t.Errorf("the imported messages list back: %d, want 40", listed)
	}
}

// TestHTTPCompressedBombRefused: a request compressed with gzip that
// expands past the message limit (a 64 MiB message in about 64 KB) is
// resource_exhausted, as a unary Connect call, a Connect stream and
// gRPC-Web, and costs the server a few megabytes, not the 64 MiB (a
// gigabyte was allocated for one before the transcoder's decompressor was
// bounded); a small compressed request is served (its answer uncompressed).
func TestHTTPCompressedBombRefused(t *testing.T) {
	_, url := httpServer(t)
	gz := func(b ...[]byte) []byte {
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		for _, p := range b {
			zw.Write(p)
		}
		zw.Close()
		return z.Bytes()
	}
	frame := func(flags byte, msg []byte) []byte {
		f := []byte{flags, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(f[1:], uint32(len(msg)))
		return append(f, msg...)
	}
	huge := bytes.Repeat([]byte("A"), 64<<20) // base64 text: a valid bytes field
	jsonBomb := gz([]byte(`{"encodedContent":"`), huge, []byte(`"}`))
	protoBomb := gz(protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), huge))
	huge = nil
	cases := []struct {
		name, path string
		header     map[string]string
		body       []byte
	}{
		{"unary Connect", cb.ContentService_Decode_FullMethodName,
			map[string]string{"Content-Type": "application/json", "Content-Encoding": "gzip"}, jsonBomb},
		{"Connect stream", cb.ConversationService_StreamMessages_FullMethodName,
			map[string]string{"Content-Type": "application/connect+json", "Connect-Content-Encoding": "gzip"}, frame(1, jsonBomb)},
		{"gRPC-Web", cb.ContentService_Decode_FullMethodName,
			map[string]string{"Content-Type": "application/grpc-web+proto", "Grpc-Encoding": "gzip"}, frame(1, protoBomb)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, url+c.path, bytes.NewReader(c.body))
			for k, v := range c.header {
				req.Header.Set(k, v)
			}
			req.Header.Set("Authorization", "Bearer "+aliceToken)
			var answer []byte
			var grpcStatus string
			allocated := allocatedBytes(func() {
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				answer, _ = io.ReadAll(io.LimitReader(resp.Body, 4<<10))
				grpcStatus = resp.Header.Get("Grpc-Status") // gRPC-Web's trailers-only answer
			})
			exhausted := strconv.Itoa(int(codes.ResourceExhausted))
			if grpcStatus != exhausted && !bytes.Contains(answer, []byte(`"code":"resource_exhausted"`)) {
				t.Errorf("answer %q, grpc-status %q: want resource_exhausted", answer, grpcStatus)
			}
			if allocated > 32<<20 {
				t.Errorf("a %d-byte request allocated %d bytes", len(c.body), allocated)
			}
		})
	}

	// A body that says gzip and is not: the caller's error.
	req, _ := http.NewRequest(http.MethodPost, url+cb.ContentService_Decode_FullMethodName, strings.NewReader(`{"encodedContent":""}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Encoding", "gzip")
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !bytes.Contains(b, []byte(`"code":"invalid_argument"`)) {
			t.Errorf("a body that is not gzip: %d %s, want 400 invalid_argument", resp.StatusCode, b)
		}
	}

	// A small compressed request is served. Its answer is not
	// compressed, whatever Accept-Encoding asks (RELIABILITY.md): the
	// transcoder sends the gRPC server requests uncompressed and grpc-go
	// answers in a request's own encoding.
	text := envelopeBytes(t, codec.TypeText, "hello")
	body := gz([]byte(`{"encodedContent":"` + base64.StdEncoding.EncodeToString(text) + `"}`))
	req, _ = http.NewRequest(http.MethodPost, url+cb.ContentService_Decode_FullMethodName, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Encoding", "gzip")
	req.Header.Set("Accept-Encoding", "gzip")
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	tr := &http.Transport{DisableCompression: true} // read the answer as sent
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if enc := resp.Header.Get("Content-Encoding"); enc != "" || err != nil || resp.StatusCode != http.StatusOK || !bytes.Contains(out, []byte(`"text":"hello"`)) {
		t.Errorf("a compressed Decode: %d, Content-Encoding %q, %s, %v; want 200 with the text, uncompressed", resp.StatusCode, enc, out, err)
	}
}

// TestHTTPBadRequestsAreInvalidArgument: JSON that does not parse, as a
// Connect call or a REST body, is invalid_argument (HTTP 400) with a
// short message, not UNKNOWN (500) repeating the offending 100 KB; a REST
// query parameter with a bad value is invalid_argument; one the path does
// not know is ignored; a huge owner in a REST path is refused without
// being repeated.
func TestHTTPBadRequestsAreInvalidArgument(t *testing.T) {
	_, url := httpServer(t)
	big := strings.Repeat("x", 100<<10)
	do := func(method, path, body string) (int, string) {
		return httpDo(t, method, url+path, aliceToken, body)
	}
	for name, c := range map[string]struct{ method, path, body string }{
		"a bad base64 value":           {http.MethodPost, cb.ContentService_Decode_FullMethodName, `{"encodedContent":"` + big + `!"}`},
		"a syntax error":               {http.MethodPost, cb.ContentService_Decode_FullMethodName, `{"encodedContent":` + big},
		"a REST body that is not JSON": {http.MethodPost, "/v1/content:decode", `{"encodedContent":[` + big + `]}`},
		"a REST parameter's value":     {http.MethodGet, "/v1/owners/alice/groups?pageSize=" + strings.Repeat("9", 8<<10) + "x", ""},
	} {
		code, body := do(c.method, c.path, c.body)
		if code != http.StatusBadRequest || !strings.Contains(body, "invalid_argument") && !strings.Contains(body, `"code":3`) {
			t.Errorf("%s: %d %.200s, want 400 invalid_argument", name, code, body)
		}
		if len(body) > 10<<10 {
			t.Errorf("%s: the error is %d bytes: it repeats the request", name, len(body))
		}
	}
	if code, body := do(http.MethodGet, "/v1/owners/alice/groups?utm_source=x&_=1700000000", ""); code != http.StatusOK {
		t.Errorf("unknown query parameters: %d %s, want them ignored", code, body)
	}
	if code, body := do(http.MethodGet, "/v1/owners/"+big[:20<<10]+"/groups", ""); code != http.StatusForbidden || len(body) > 1<<10 {
		t.Errorf("a 20 KB owner: %d, %d bytes", code, len(body))
	}
	// A request line past the header limit (and net/http's 4 KiB of slack)
	// is refused before any handler.
	if code, _ := do(http.MethodGet, "/v1/owners/alice/groups?pageToken="+big[:httpjson.MaxHeaderBytes+8<<10], ""); code != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a request line over %d bytes: %d, want 431", httpjson.MaxHeaderBytes, code)
	}
}
