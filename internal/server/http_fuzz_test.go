package server

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"go.uber.org/zap"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"

	"github.com/contentbackup/contentbackup/internal/server/authz"
	"github.com/contentbackup/contentbackup/internal/server/httpjson"
)

// FuzzHTTPRequest drives the HTTP/JSON listener's request path (the door,
// then the transcoder) with any method, path, query, Content-Type, body
// and credential. Whatever comes: no panic; an anonymous request to
// anything but health is refused before its body is read (401, or 400
// for a path or query that is not UTF-8); and no request is answered 500,
// the server's own failure, which no input should provoke.
func FuzzHTTPRequest(f *testing.F) {
	srv := New(Config{Auth: policyAuth(f, perimeterPolicy(true))}, zap.NewNop())
	h, err := srv.HTTPHandlerWith(httpjson.Limits{MaxRecvBytes: 64 << 10})
	if err != nil {
		f.Fatal(err)
	}
	decode := cb.ContentService_Decode_FullMethodName
	for _, seed := range []struct {
		method, target, contentType string
		auth                        bool
		body                        string
	}{
		{"POST", decode, "application/json", true, `{"encodedContent":{}}`},
		{"POST", decode, "application/json", false, `{}`},
		{"POST", decode, "application/json", true, ``},
		{"POST", decode, "application/proto", true, "\x0a\x00"},
		{"POST", decode, "application/connect+json", true, "\x00\x00\x00\x00\x02{}"},
		{"POST", decode, "application/grpc-web+proto", true, "\x00\x00\x00\x00\x00"},
		{"GET", "/v1/owners/alice/groups?page_size=2", "", true, ``},
		{"GET", "/v1/owners/alice/groups?owner=bob", "", true, ``},
		{"GET", "/v1/owners/%ff/groups", "", true, ``},
		{"POST", "/v1/content:decode", "text/plain", true, `{}`},
		{"POST", "/grpc.health.v1.Health/Check", "application/json", false, `{}`},
		{"PUT", decode, "application/json; charset=utf-8", true, `{"x":`},
	} {
		f.Add(seed.method, seed.target, seed.contentType, seed.auth, []byte(seed.body))
	}
	f.Fuzz(func(t *testing.T, method, target, contentType string, withAuth bool, body []byte) {
		u, err := url.ParseRequestURI(target)
		if err != nil || !validMethod(method) || strings.ContainsAny(contentType, "\r\n\x00") {
			return
		}
		r := &http.Request{Method: method, URL: u, RequestURI: target, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{}, Host: "fuzz", RemoteAddr: "127.0.0.1:1",
			Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body))}
		if contentType != "" {
			r.Header.Set("Content-Type", contentType)
		}
		if withAuth {
			r.Header.Set("Authorization", "Bearer "+aliceToken)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		code := w.Result().StatusCode
		health := authz.ServiceOf(u.Path) == authz.HealthService
		if !withAuth && !health && code != http.StatusUnauthorized && code != http.StatusBadRequest {
			t.Fatalf("anonymous %s %q: %d %q; want 401 before its body", method, target, code, w.Body.String())
		}
		if !withAuth && !health && code == http.StatusBadRequest && utf8.ValidString(u.Path) && utf8Query(u.RawQuery) {
			t.Fatalf("anonymous %s %q: 400 %q before authentication", method, target, w.Body.String())
		}
		if code == http.StatusInternalServerError {
			t.Fatalf("%s %q (%q, %d bytes): 500 %q", method, target, contentType, len(body), w.Body.String())
		}
	})
}

// utf8Query reports whether a raw query decodes to UTF-8 throughout.
func utf8Query(raw string) bool {
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

// validMethod is what net/http would parse as a method: a token.
func validMethod(m string) bool {
	if m == "" {
		return false
	}
	for _, c := range m {
		if c <= ' ' || c >= 0x7f || strings.ContainsRune("()<>@,;:\\\"/[]?={}", c) {
			return false
		}
	}
	return true
}
