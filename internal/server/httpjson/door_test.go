package httpjson

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// The door's own tests, on a grpc.Server serving only the health service
// and an Admit the test controls: what the door refuses before a byte of
// a body is read, and what it hands the call behind it. The server's
// tests (internal/server, http_test.go and door_test.go) run it with the
// real authorizer and services over TCP.

type markKey struct{}

// doorFor is the listener's handler over a health server, with admit; seen
// records the admitted request's mark as the gRPC call behind the door
// sees it in its context.
func doorFor(t *testing.T, admit Admit, limits Limits) (h http.Handler, seen *atomic.Value) {
	t.Helper()
	seen = &atomic.Value{}
	g := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		if m, ok := ctx.Value(markKey{}).(string); ok {
			seen.Store(m)
		}
		return next(ctx, req)
	}))
	healthpb.RegisterHealthServer(g, health.NewServer())
	h, err := New(g, admit, limits, nil)
	if err != nil {
		t.Fatal(err)
	}
	return h, seen
}

// admitAs admits every request as who, marking its context.
func admitAs(who string) Admit {
	return func(r *http.Request) (*http.Request, string, error) {
		return r.WithContext(context.WithValue(r.Context(), markKey{}, "proven:"+who)), who, nil
	}
}

// readFlag is a body that records whether anything read it.
type readFlag struct {
	io.Reader
	read atomic.Bool
}

func (b *readFlag) Read(p []byte) (int, error) {
	b.read.Store(true)
	return b.Reader.Read(p)
}

const checkPath = "/grpc.health.v1.Health/Check"

func post(path, contentType string, body io.Reader) *http.Request {
	r := httptest.NewRequest(http.MethodPost, path, body)
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	return r
}

func connectCode(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	var e struct {
		Code string `json:"code"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
		t.Fatalf("not a Connect error (%d): %s", rec.Code, rec.Body)
	}
	return e.Code
}

// TestDoorServesWhatAdmitAdmitted: an admitted call is served, and the
// call behind the door runs in the context Admit returned (what it proved
// is not proven again).
func TestDoorServesWhatAdmitAdmitted(t *testing.T) {
	h, seen := doorFor(t, admitAs("alice"), Limits{})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, post(checkPath, "application/json", strings.NewReader(`{}`)))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "SERVING") {
		t.Fatalf("health over the door: %d %s", rec.Code, rec.Body)
	}
	if got, _ := seen.Load().(string); got != "proven:alice" {
		t.Errorf("the call behind the door saw %q in its context, want what Admit proved", got)
	}
}

// TestDoorRefusesBeforeTheBody: what the door refuses, it refuses with the
// right status and Connect code before a byte of the body is read.
func TestDoorRefusesBeforeTheBody(t *testing.T) {
	refuseAll := func(r *http.Request) (*http.Request, string, error) { return nil, "", errors.New("no credentials") }
	for _, tc := range []struct {
		name   string
		admit  Admit
		limits Limits
		req    func(body io.Reader) *http.Request
		status int
		code   string
	}{
		{"an unproven caller", refuseAll, Limits{}, func(b io.Reader) *http.Request { return post(checkPath, "application/json", b) },
			http.StatusUnauthorized, "unauthenticated"},
		{"a path that is not UTF-8", admitAs("alice"), Limits{}, func(b io.Reader) *http.Request {
			r := post(checkPath, "application/json", b)
			r.URL.Path = "/grpc.health.v1.Health/\xff"
			return r
		}, http.StatusBadRequest, "invalid_argument"},
		{"a body of an unknown type", admitAs("alice"), Limits{}, func(b io.Reader) *http.Request { return post(checkPath, "text/plain", b) },
			http.StatusUnsupportedMediaType, "invalid_argument"},
		{"a body that declares more than a message", admitAs("alice"), Limits{MaxRecvBytes: 1024}, func(b io.Reader) *http.Request {
			r := post(checkPath, "application/json", b)
			r.ContentLength = 1 << 20
			return r
		}, http.StatusRequestEntityTooLarge, "resource_exhausted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := doorFor(t, tc.admit, tc.limits)
			body := &readFlag{Reader: strings.NewReader(`{}`)}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, tc.req(body))
			if rec.Code != tc.status || connectCode(t, rec) != tc.code {
				t.Errorf("%d %s, want %d %s", rec.Code, rec.Body, tc.status, tc.code)
			}
			if body.read.Load() {
				t.Error("the door read the body of a request it refused")
			}
		})
	}
}

// TestDoorBoundsBodiesPerCaller: one caller holds at most its share of the
// places for bodies; past it a request is 429 unread, while another
// caller is still served.
func TestDoorBoundsBodiesPerCaller(t *testing.T) {
	who := "alice"
	admit := func(r *http.Request) (*http.Request, string, error) { return r, who, nil }
	h, _ := doorFor(t, admit, Limits{MaxBodies: 8, MaxBodiesPerCaller: 1})
	d := h.(*door)
	if !d.takeCallerPlace("alice") {
		t.Fatal("alice's first place")
	}
	defer d.giveCallerPlace("alice")
	body := &readFlag{Reader: strings.NewReader(`{}`)}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, post(checkPath, "application/json", body))
	if rec.Code != http.StatusTooManyRequests || connectCode(t, rec) != "resource_exhausted" || body.read.Load() {
		t.Errorf("alice past her places: %d %s (body read: %v), want 429 unread", rec.Code, rec.Body, body.read.Load())
	}
	who = "bob"
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, post(checkPath, "application/json", strings.NewReader(`{}`)))
	if rec.Code != http.StatusOK {
		t.Errorf("bob while alice holds her places: %d %s", rec.Code, rec.Body)
	}
}
