package httpjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	"go.uber.org/zap"
	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/contentbackup/contentbackup/internal/budget"
	"github.com/contentbackup/contentbackup/internal/fault"
)

// Limits bounds what the HTTP/JSON listener lets a caller make it
// hold. Zero fields take DefaultLimits.
type Limits struct {
	// MaxRecvBytes is the gRPC message limit the listener's bodies are
	// sized from (see New).
	MaxRecvBytes int
	// BodyGrace is how long a body may take to start arriving, and
	// MinBodyRate the average rate (bytes a second) it must keep after
	// that: a body that falls behind is cut off and its connection closed,
	// so a trickling client holds nothing for long.
	BodyGrace   time.Duration
	MinBodyRate int64
	// MaxBodies bounds the requests reading a body at once (a client
	// stream reads one for its life); past it a request is UNAVAILABLE
	// (503) before a byte of its body is read.
	MaxBodies int
	// MaxBodiesPerCaller bounds those of one principal (or, on the open
	// paths, one client address); past it a request is RESOURCE_EXHAUSTED
	// (429) before a byte of its body is read, so one caller cannot hold
	// every place (default a quarter of MaxBodies).
	MaxBodiesPerCaller int
	// Memory, when set, is the server-wide memory budget: a compressed
	// body holds a message's room from it (1.5 × MaxRecvBytes + 4 KiB)
	// while it is read, or is refused 429 before a byte is inflated.
	Memory *budget.Pool
}

// DefaultMaxRecvBytes is the gRPC server's default message limit, which
// the listener's follows unless told otherwise.
const DefaultMaxRecvBytes = 32 << 20

// DefaultLimits are the listener's defaults.
var DefaultLimits = Limits{
	MaxRecvBytes: DefaultMaxRecvBytes, BodyGrace: 10 * time.Second, MinBodyRate: 64 << 10, MaxBodies: 64,
}

func orDefault[T int | int64 | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	orDefault(&l.MaxRecvBytes, d.MaxRecvBytes)
	orDefault(&l.BodyGrace, d.BodyGrace)
	orDefault(&l.MinBodyRate, d.MinBodyRate)
	orDefault(&l.MaxBodies, d.MaxBodies)
	orDefault(&l.MaxBodiesPerCaller, max(1, l.MaxBodies/4))
	return l
}

// door is the HTTP/JSON listener's front: what every request passes
// before the transcoder reads a byte of its body. It proves the caller
// (an anonymous request costs its headers, whatever it declares or
// compresses), refuses a path or query that is not UTF-8, a body of a
// type nobody serves, a query parameter that would override a path's,
// and bounds the body: in size (never buffered by its declared length),
// in time (BodyGrace, then MinBodyRate) and in how many are read at once.
type door struct {
	admit   Admit
	log     *zap.Logger
	limits  Limits
	maxBody int64
	bodies  chan struct{}
	// callers counts the body places each caller holds.
	callersMu sync.Mutex
	callers   map[string]int
	routes    []restRoute
	next      http.Handler // the transcoder
	openapi   []byte       // served at OpenAPIPath
}

// restRoute is one google.api.http path with the fields it binds.
type restRoute struct {
	method string
	path   *regexp.Regexp
	binds  []string
}

// servedDocument answers a proven caller's GET of the OpenAPI document.
func (d *door) servedDocument(w http.ResponseWriter, r *http.Request) bool {
	if r.URL.Path != OpenAPIPath || r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(d.openapi)
	return true
}

func (d *door) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !utf8.ValidString(r.URL.Path) || !validQuery(r.URL.RawQuery) {
		d.log.Info("http request refused", zap.String("reason", "invalid UTF-8 in path or query"), zap.String("peer.address", r.RemoteAddr))
		refuse(w, http.StatusBadRequest, "invalid_argument", "the request's path or query is not valid UTF-8")
		return
	}
	admitted, who, err := d.admit(r)
	if err != nil {
		refuseUnauthenticated(w, r, err.Error())
		return
	}
	r, who = admitted, callerKey(who, admitted)
	if d.servedDocument(w, r) {
		return
	}
	if field, ok := d.overridesPath(r); ok {
		refuse(w, http.StatusBadRequest, "invalid_argument", "query parameter "+field+" names a field the path binds; the path's value is the one used")
		return
	}
	hasBody := r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
	if !hasBody && r.Method == http.MethodPost && isJSON(r.Header.Get("Content-Type")) {
		refuse(w, http.StatusBadRequest, "invalid_argument", "the request body is empty; an empty message is {}")
		return
	}
	if !hasBody {
		dw := &doorWriter{ResponseWriter: w, body: &pacedBody{}, rest: !rpcPath(r.URL.Path)}
		defer dw.finish()
		d.next.ServeHTTP(dw, r)
		return
	}
	if !supportedBody(r.Header.Get("Content-Type")) {
		refuse(w, http.StatusUnsupportedMediaType, "invalid_argument",
			"Content-Type must be application/json or application/proto (or a Connect, gRPC or gRPC-Web streaming type)")
		return
	}
	leave, ok := d.takeBodyPlaces(w, who)
	if !ok {
		return
	}
	defer leave()
	if !framed(r) && r.ContentLength > d.maxBody {
		refuse413(w, r.ContentLength, d.maxBody)
		return
	}
	if compressedBody(r) {
		release, ok := d.chargeInflation(w)
		if !ok {
			return
		}
		defer release()
	}
	body := &pacedBody{body: r.Body, rc: http.NewResponseController(w), start: time.Now(), grace: d.limits.BodyGrace, rate: d.limits.MinBodyRate}
	r.Body = body
	dw := &doorWriter{ResponseWriter: w, body: body, rest: !rpcPath(r.URL.Path)}
	defer dw.finish()
	w = dw
	// Nothing downstream sizes a buffer by what the caller declares: the
	// transcoder reads what arrives, up to the limit.
	r.ContentLength = -1
	r.Header.Del("Content-Length")
	if !framed(r) {
		r.Body = &cappedBody{ReadCloser: http.MaxBytesReader(w, r.Body, d.maxBody), limit: d.maxBody, over: &dw.over}
		if isJSON(r.Header.Get("Content-Type")) {
			first, err := peekByte(r.Body)
			if err == io.EOF {
				refuse(w, http.StatusBadRequest, "invalid_argument", "the request body is empty; an empty message is {}")
				return
			}
			r.Body = readCloser{io.MultiReader(bytes.NewReader(first), r.Body), r.Body}
		}
		connectUnary(r)
	}
	d.next.ServeHTTP(w, r)
	// What the transcoder left unread (a refused stream's rest, a message
	// over the limit) is read and dropped, up to maxDrain and at the
	// body's pace, so an HTTP/1.1 client still writing it reads the
	// answer rather than a connection reset under it. Nothing is kept.
	_, _ = io.Copy(io.Discard, io.LimitReader(body, max(d.maxBody, maxDrain)))
}

// compressedBody reports whether r's body, or its messages, are
// compressed in a way the transcoder inflates.
func compressedBody(r *http.Request) bool {
	for _, h := range []string{"Content-Encoding", "Connect-Content-Encoding", "Grpc-Encoding"} {
		if v := r.Header.Get(h); v != "" && v != "identity" {
			return true
		}
	}
	return false
}

// maxDrain bounds what the door reads and drops of a body the handler
// left unread; past it the connection is closed.
const maxDrain = 64 << 20

// overridesPath reports a query parameter naming a field r's REST route
// binds in its path (`/v1/owners/alice/backups?owner=bob`): refused
// rather than letting either win silently.
func (d *door) overridesPath(r *http.Request) (string, bool) {
	if r.URL.RawQuery == "" || rpcPath(r.URL.Path) {
		return "", false
	}
	q := r.URL.Query()
	for _, route := range d.routes {
		if route.method != r.Method || !route.path.MatchString(r.URL.Path) {
			continue
		}
		for _, f := range route.binds {
			for name := range q {
				if name == f || strings.HasPrefix(name, f+".") || name == jsonName(f) {
					return fmt.Sprintf("%.64q", name), true
				}
			}
		}
	}
	return "", false
}

// jsonName is a field name's lowerCamelCase JSON form.
func jsonName(f string) string {
	var b strings.Builder
	up := false
	for _, c := range f {
		if c == '_' {
			up = true
			continue
		}
		if up && 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		up = false
		b.WriteRune(c)
	}
	return b.String()
}

// restRoutes reads the google.api.http paths of g's services.
func restRoutes(g *grpc.Server) []restRoute {
	var routes []restRoute
	for name := range g.GetServiceInfo() {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
		if err != nil {
			continue
		}
		sd, ok := d.(protoreflect.ServiceDescriptor)
		if !ok {
			continue
		}
		for i := range sd.Methods().Len() {
			opts := protodesc.ToMethodDescriptorProto(sd.Methods().Get(i)).GetOptions()
			rule, _ := proto.GetExtension(opts, annotations.E_Http).(*annotations.HttpRule)
			if rule == nil {
				continue
			}
			for _, r := range append([]*annotations.HttpRule{rule}, rule.GetAdditionalBindings()...) {
				if route, ok := routeOf(r); ok {
					routes = append(routes, route)
				}
			}
		}
	}
	return routes
}

var pathVariable = regexp.MustCompile(`\{([a-z_.]+)(=[^}]*)?\}`)

func routeOf(r *annotations.HttpRule) (restRoute, bool) {
	var method, tmpl string
	switch p := r.GetPattern().(type) {
	case *annotations.HttpRule_Get:
		method, tmpl = http.MethodGet, p.Get
	case *annotations.HttpRule_Post:
		method, tmpl = http.MethodPost, p.Post
	case *annotations.HttpRule_Put:
		method, tmpl = http.MethodPut, p.Put
	case *annotations.HttpRule_Delete:
		method, tmpl = http.MethodDelete, p.Delete
	case *annotations.HttpRule_Patch:
		method, tmpl = http.MethodPatch, p.Patch
	default:
		return restRoute{}, false
	}
	var binds []string
	var expr strings.Builder
	expr.WriteString("^")
	last := 0
	for _, m := range pathVariable.FindAllStringSubmatchIndex(tmpl, -1) {
		expr.WriteString(regexp.QuoteMeta(tmpl[last:m[0]]))
		expr.WriteString(`[^/]+`)
		binds = append(binds, tmpl[m[2]:m[3]])
		last = m[1]
	}
	expr.WriteString(regexp.QuoteMeta(tmpl[last:]))
	expr.WriteString("$")
	if len(binds) == 0 {
		return restRoute{}, false
	}
	return restRoute{method: method, path: regexp.MustCompile(expr.String()), binds: binds}, true
}

// validQuery reports whether every key and value of a raw query decodes
// to UTF-8.
func validQuery(raw string) bool {
	if raw == "" {
		return true
	}
	values, err := url.ParseQuery(raw)
	if err != nil {
		return false
	}
	for k, vs := range values {
		if !utf8.ValidString(k) {
			return false
		}
		for _, v := range vs {
			if !utf8.ValidString(v) {
				return false
			}
		}
	}
	return true
}

// supportedBody reports whether a body of content type ct is one the
// listener serves.
func supportedBody(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	switch mt {
	case "application/json", "application/proto",
		"application/connect+json", "application/connect+proto",
		"application/grpc", "application/grpc+proto",
		"application/grpc-web", "application/grpc-web+proto", "application/grpc-web+json":
		return true
	}
	return false
}

func isJSON(ct string) bool {
	mt, _, _ := mime.ParseMediaType(ct)
	return mt == "application/json"
}

// clientHost is the host of a request's remote address.
func clientHost(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// pacedBody is a request body that must keep arriving: its next byte is
// due by start + grace + read/rate, and the connection's read deadline
// says so, so a body that trickles or stops is cut off (its read fails and
// its connection closes) rather than held.
type pacedBody struct {
	body  io.ReadCloser
	rc    *http.ResponseController
	start time.Time
	grace time.Duration
	rate  int64
	read  int64
	// overdue: the body fell behind its pace and was cut off.
	overdue bool
}

// doorWriter is the answer as the door corrects it: a request whose
// body was cut off for its pace is 408 deadline_exceeded, whatever the
// transcoder makes of the failed read (a cancelled call, 499); and a
// message the gRPC server found over its limit once transcoded (a JSON
// body under the listener's limit whose message is over the gRPC one) is
// 413, as any body past the limit is, not the 429 Connect gives
// resource_exhausted.
//
// A REST path's error, which the transcoder writes as google.rpc.Status
// with a numeric code, is rewritten to the Connect shape every other
// error of the listener has: {"code": "<string code>", "message": …,
// "details": […]}.
type doorWriter struct {
	http.ResponseWriter
	body    *pacedBody
	over    overLimitBody // the unframed body sent more than the limit
	swallow bool          // the answer was replaced: drop the transcoder's
	held    int           // a 429 waiting for its body to say why
	// rest: a REST path's answer; restErr holds its error's status and
	// body until finish rewrites them.
	rest    bool
	restErr int
	errBody []byte
}

// overLimitBody records that an unframed body went past its limit: limit
// holds it once more than it was sent, 0 until then.
type overLimitBody struct{ limit atomic.Int64 }

// cappedBody is an unframed body cut off at limit bytes, recording when
// the caller sent more.
type cappedBody struct {
	io.ReadCloser
	limit int64
	over  *overLimitBody
}

func (b *cappedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	var tooMuch *http.MaxBytesError
	if errors.As(err, &tooMuch) {
		b.over.limit.Store(b.limit)
	}
	return n, err
}

// maxErrorBody bounds the REST error body the door rewrites.
const maxErrorBody = 64 << 10

// overLimit is grpc-go's word for a message over MaxRecvMsgSize.
var overLimit = []byte("larger than max")

func (w *doorWriter) WriteHeader(code int) {
	switch {
	case w.swallow:
	case w.body.overdue:
		w.swallow = true
		w.ResponseWriter.Header().Set("Connection", "close")
		httpError(w.ResponseWriter, http.StatusRequestTimeout, "deadline_exceeded",
			fmt.Sprintf("the request body arrived slower than %d bytes a second after %s", w.body.rate, w.body.grace))
	case w.over.limit.Load() > 0:
		// The transcoder answers a read error as UNAVAILABLE; the caller
		// sent too much, which is 413 resource_exhausted, as for a body
		// that declares too much.
		w.swallow = true
		w.ResponseWriter.Header().Set("Connection", "close")
		httpError(w.ResponseWriter, http.StatusRequestEntityTooLarge, "resource_exhausted",
			fmt.Sprintf("the request body is over the limit of %d bytes; it was cut off there", w.over.limit.Load()))
	case w.rest && code >= 400:
		w.restErr = code
	case code == http.StatusTooManyRequests:
		w.held = code
	default:
		w.ResponseWriter.WriteHeader(code)
	}
}

func (w *doorWriter) Write(p []byte) (int, error) {
	if (w.body.overdue || w.over.limit.Load() > 0) && !w.swallow {
		w.WriteHeader(http.StatusRequestTimeout)
	}
	if w.swallow {
		return len(p), nil
	}
	if w.restErr != 0 {
		if room := maxErrorBody - len(w.errBody); room > 0 {
			w.errBody = append(w.errBody, p[:min(len(p), room)]...)
		}
		return len(p), nil
	}
	if w.held != 0 {
		code := w.held
		if bytes.Contains(p, overLimit) {
			code = http.StatusRequestEntityTooLarge
		}
		w.held = 0
		w.ResponseWriter.WriteHeader(code)
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *doorWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *doorWriter) Flush() {
	if w.swallow || w.restErr != 0 {
		return
	}
	if w.held != 0 {
		w.ResponseWriter.WriteHeader(w.held)
		w.held = 0
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// finish writes a held status that no body followed, and a REST error
// in the Connect shape.
func (w *doorWriter) finish() {
	if w.swallow {
		return
	}
	if w.held != 0 {
		w.ResponseWriter.WriteHeader(w.held)
		w.held = 0
	}
	if w.restErr == 0 {
		return
	}
	code := w.restErr
	var st struct {
		Code    int               `json:"code"`
		Message string            `json:"message"`
		Details []json.RawMessage `json:"details"`
	}
	if err := json.Unmarshal(w.errBody, &st); err != nil || st.Code == 0 {
		// Not a status: the router's own plain-text answer (a path no
		// method serves).
		st.Code, st.Message = int(connect.CodeUnimplemented), "no method serves this path: "+strings.TrimSpace(http.StatusText(code))
		if code != http.StatusNotFound && code != http.StatusMethodNotAllowed {
			st.Code, st.Message = int(connect.CodeInvalidArgument), strings.TrimSpace(fault.Clip(string(w.errBody), 200, "…"))
		}
		st.Details = nil
	}
	if code == http.StatusTooManyRequests && bytes.Contains(w.errBody, overLimit) {
		code = http.StatusRequestEntityTooLarge
	}
	out, err := json.Marshal(struct {
		Code    string            `json:"code"`
		Message string            `json:"message"`
		Details []json.RawMessage `json:"details,omitempty"`
	}{connect.Code(st.Code).String(), st.Message, st.Details})
	if err != nil {
		out = w.errBody
	}
	w.ResponseWriter.Header().Set("Content-Type", "application/json")
	w.ResponseWriter.Header().Del("Content-Length")
	w.ResponseWriter.WriteHeader(code)
	_, _ = w.ResponseWriter.Write(append(out, '\n'))
}

func (b *pacedBody) Read(p []byte) (int, error) {
	due := b.start.Add(b.grace + time.Duration(float64(b.read+1)/float64(b.rate)*float64(time.Second)))
	_ = b.rc.SetReadDeadline(due)
	n, err := b.body.Read(p)
	b.read += int64(n)
	if err != nil && !errors.Is(err, io.EOF) && time.Now().After(due) {
		b.overdue = true
		return n, connect.NewError(connect.CodeDeadlineExceeded,
			fmt.Errorf("the request body arrived slower than %d bytes a second after %s", b.rate, b.grace))
	}
	return n, err
}

// Close does not close the request's body: a handler that closes it
// early would make net/http close the connection under a client still
// writing; the door drains what is left, and net/http closes it after.
func (b *pacedBody) Close() error { return nil }

type readCloser struct {
	io.Reader
	io.Closer
}

// peekByte reads r's first byte; io.EOF for an empty body.
func peekByte(r io.Reader) ([]byte, error) {
	var b [1]byte
	for {
		n, err := r.Read(b[:])
		if n == 1 {
			return b[:], nil
		}
		if err != nil {
			return nil, err
		}
	}
}
