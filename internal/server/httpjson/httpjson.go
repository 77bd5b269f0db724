// Package httpjson serves a grpc.Server's services to callers without
// gRPC: the Connect protocol (JSON or binary protobuf; unary calls and
// streams), gRPC-Web, and REST paths where the API declares them
// (google.api.http), transcoded by connectrpc.com/vanguard into calls of
// that same grpc.Server, so every call passes its interceptors.
//
// In front of the transcoder stands the door (door.go): the caller is
// proven before a byte of its body is read, the body is bounded in bytes,
// time and concurrency, and what curl users get wrong is refused with the
// right status, in one error shape.
package httpjson

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"connectrpc.com/connect"
	"connectrpc.com/vanguard"
	"connectrpc.com/vanguard/vanguardgrpc"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/contentbackup/contentbackup/api/openapi"
)

// Admit proves a request's caller before its body is read and names it
// (a principal; "" on the paths open to anyone, health, which are
// Admit's to decide): nil admits it, an error (its message safe to show)
// refuses it 401. The request it returns is the one served: its context
// carries what Admit proved, so the call is not proven a second time
// behind the door.
type Admit func(r *http.Request) (admitted *http.Request, who string, err error)

// callerKey is who a request's places are counted against: its principal,
// or on the open paths its client address.
func callerKey(who string, r *http.Request) string {
	if who == "" {
		return "address " + clientHost(r.RemoteAddr)
	}
	return who
}

// New serves g's services to callers without gRPC: the
// Connect protocol (JSON or binary protobuf; unary calls and server
// streams), gRPC-Web, and REST paths where the API declares them
// (google.api.http: /v1/content:decode, /v1/owners/{owner}/backups...),
// transcoded by connectrpc.com/vanguard into calls
// of this same grpc.Server. Every call therefore passes the same
// interceptors as a native one: authentication (the Authorization
// header), authorization, limits, budgets, request ids, metrics and status
// mapping; an error is the protocol's JSON error with the same code.
//
// A message is at most maxBody bytes: the gRPC message limit with room for
// JSON's base64 (4/3) and its syntax. An unframed request body (a unary
// Connect call, a REST path) is one message: one that declares more is
// refused before a byte of it is read (413 with a Connect error,
// resource_exhausted; 413 rather than the 429 Connect gives that code, as
// a plain HTTP client expects), one that sends more is cut off there. A
// framed body (the Connect streaming protocol, gRPC-Web, gRPC) carries a
// stream of messages, as long as a client stream is (an Import's
// archive): the transcoder refuses each message over the limit before
// buffering it, RESOURCE_EXHAUSTED, and the same limit holds each response
// message.
func New(g *grpc.Server, admit Admit, limits Limits, log *zap.Logger) (http.Handler, error) {
	limits = limits.withDefaults()
	if log == nil {
		log = zap.NewNop()
	}
	maxBody := min(int64(limits.MaxRecvBytes)*3/2+4096, math.MaxUint32)
	// A compressed message is read whole by the transcoder before any
	// limit of its own: gzip's decompressor is replaced by one that stops
	// at the message limit, and the transcoder sends the gRPC server its
	// messages uncompressed (no second compression to undo).
	gunzip := func() connect.Decompressor { return &boundedGunzip{limit: maxBody} }
	gzipper := func() connect.Compressor { return gzip.NewWriter(io.Discard) }
	tc, err := vanguardgrpc.NewTranscoder(g,
		vanguard.WithCodec(func(res vanguard.TypeResolver) vanguard.Codec {
			c := vanguard.NewJSONCodec(res)
			// Strict, as grpcurl is: a misspelled field is the caller's
			// error, not silently dropped.
			c.UnmarshalOptions.DiscardUnknown = false
			return jsonCodec{c}
		}),
		vanguard.WithCompression(vanguard.CompressionGzip, gzipper, gunzip),
		vanguard.WithDefaultServiceOptions(vanguard.WithMaxMessageBufferBytes(uint32(maxBody)), vanguard.WithNoTargetCompression(),
			// A query parameter a REST path does not know is ignored, as
			// HTTP caches' and proxies' own parameters are, rather than
			// an UNKNOWN error repeating its name.
			vanguard.WithRESTUnmarshalOptions(vanguard.RESTUnmarshalOptions{DiscardUnknownQueryParams: true})))
	if err != nil {
		return nil, fmt.Errorf("http/json: %w", err)
	}
	return &door{admit: admit, log: log, limits: limits, maxBody: maxBody,
		bodies: make(chan struct{}, limits.MaxBodies), callers: map[string]int{}, routes: restRoutes(g), next: tc,
		openapi: openapi.Document()}, nil
}

// OpenAPIPath is where a proven caller reads the OpenAPI document of the
// listener's routes (api/openapi).
const OpenAPIPath = "/openapi.json"

// connectUnary marks a plain JSON or protobuf POST to /<service>/<method>
// as the Connect protocol's unary call it can only be (the REST bindings
// of google.api.http live under /v1/), so that `curl -H 'Content-Type:
// application/json' -d ...` works as Connect's own servers let it; vanguard
// otherwise reads a request without Connect-Protocol-Version as REST.
func connectUnary(r *http.Request) {
	if r.Method != http.MethodPost || r.Header.Get("Connect-Protocol-Version") != "" || !rpcPath(r.URL.Path) {
		return
	}
	switch r.Header.Get("Content-Type") {
	case "application/json", "application/proto":
		r.Header.Set("Connect-Protocol-Version", "1")
	}
}

// framed reports whether r's body is a stream of length-prefixed messages
// (Connect streaming, gRPC-Web, gRPC), each bounded by the transcoder.
func framed(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	return strings.HasPrefix(ct, "application/connect+") || strings.HasPrefix(ct, "application/grpc")
}

// rpcPath reports whether path is /<package.Service>/<Method>, an RPC's
// own path, rather than one of the REST paths of google.api.http.
func rpcPath(path string) bool {
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	return len(parts) == 2 && strings.Contains(parts[0], ".") && parts[1] != ""
}

// tooLarge answers a body over the limit as the Connect protocol answers
// an error: JSON with its code.
func tooLarge(w http.ResponseWriter, got, limit int64) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusRequestEntityTooLarge)
	fmt.Fprintf(w, `{"code":"resource_exhausted","message":"request body of %s bytes exceeds the limit of %s bytes"}`+"\n",
		strconv.FormatInt(got, 10), strconv.FormatInt(limit, 10))
}

// boundedGunzip is gzip's decompressor for the HTTP/JSON listener, whose
// output past limit bytes is an error: a body of a few hundred kilobytes
// otherwise expands to whatever it holds (a gigabyte allocated for a
// 200 KB request, measured) before the message limit is checked.
type boundedGunzip struct {
	gz    gzip.Reader
	limit int64
	read  int64
	ready bool
}

func (d *boundedGunzip) Reset(r io.Reader) error {
	d.read, d.ready = 0, true
	return notGzip(d.gz.Reset(r))
}

func (d *boundedGunzip) Read(p []byte) (int, error) {
	if !d.ready {
		return 0, errors.New("gzip: read before reset")
	}
	// Up to one byte past the limit, to tell "exactly the limit" from more.
	if room := d.limit + 1 - d.read; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := d.gz.Read(p)
	d.read += int64(n)
	if d.read > d.limit {
		return 0, connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("a compressed message expands past the limit of %d bytes", d.limit))
	}
	if err != nil && err != io.EOF {
		return n, notGzip(err)
	}
	return n, err
}

// notGzip makes a body that is not gzip the caller's error
// (invalid_argument), not the transcoder's UNKNOWN.
func notGzip(err error) error {
	if err == nil {
		return nil
	}
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("the body is not valid gzip: %w", err))
}

func (d *boundedGunzip) Close() error { return d.gz.Close() }

// MaxHeaderBytes bounds an HTTP/JSON request's line and headers.
const MaxHeaderBytes = 32 << 10

// jsonCodec is the transcoder's JSON codec, except that a request that
// does not parse is INVALID_ARGUMENT with a short message, not the
// UNKNOWN (HTTP 500) the transcoder makes of it, whose message repeated
// the offending value whole (100 KB of a bad base64 string, measured).
type jsonCodec struct{ *vanguard.JSONCodec }

func (c jsonCodec) Unmarshal(b []byte, m proto.Message) error {
	return badRequest(c.JSONCodec.Unmarshal(b, m))
}

func (c jsonCodec) UnmarshalField(b []byte, m proto.Message, f protoreflect.FieldDescriptor) error {
	return badRequest(c.JSONCodec.UnmarshalField(b, m, f))
}

// maxParseError bounds the message of a request that does not parse.
const maxParseError = 200

func badRequest(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if len(msg) > maxParseError {
		end := maxParseError
		for end > 0 && !utf8.RuneStart(msg[end]) {
			end--
		}
		msg = msg[:end] + "…"
	}
	return connect.NewError(connect.CodeInvalidArgument, errors.New("request is not valid JSON for its message: "+msg))
}
