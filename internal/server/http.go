package server

import (
	"crypto/x509"
	"errors"
	"net/http"

	"github.com/contentbackup/contentbackup/internal/server/httpjson"
)

// HTTPHandler serves the server's services to callers without gRPC
// (package httpjson), every call passing this server's own interceptors;
// a message is at most maxRecvBytes (the gRPC limit) as protobuf, 1.5
// times it and 4 KiB as JSON.
func (s *Server) HTTPHandler(maxRecvBytes int) (http.Handler, error) {
	return s.HTTPHandlerWith(httpjson.Limits{MaxRecvBytes: maxRecvBytes})
}

// HTTPHandlerWith is HTTPHandler under limits.
func (s *Server) HTTPHandlerWith(limits httpjson.Limits) (http.Handler, error) {
	return httpjson.New(s.grpc, s.authz.admitHTTP, limits, s.log)
}

// admitHTTP proves an HTTP request's caller as the gRPC listener proves
// one (the Authorization header, or the client certificate TLS
// verified), before the listener reads its body; health, and reflection
// where it is public, are open.
func (a *authorizer) admitHTTP(r *http.Request) error {
	svc := serviceOf(r.URL.Path)
	if svc == healthService || a.publicReflection && (svc == reflectionV1 || svc == reflectionV1Alpha) {
		return nil
	}
	if a.authn == nil {
		return errors.New("no authentication is configured")
	}
	values := r.Header.Values("Authorization")
	if len(values) > 1 {
		return errors.New("credentials not valid: more than one authorization header")
	}
	header := ""
	if len(values) == 1 {
		header = values[0]
	}
	var leaf *x509.Certificate
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		leaf = r.TLS.VerifiedChains[0][0]
	}
	_, err := a.authn.Authenticate(r.Context(), header, leaf)
	if err != nil {
		a.refuse(r.Context(), r.URL.Path, "unauthenticated", err)
	}
	return err
}
