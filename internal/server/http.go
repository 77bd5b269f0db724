package server

import (
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
	if limits.Memory == nil {
		limits.Memory = s.pool
	}
	return httpjson.New(s.grpc, s.authz.AdmitHTTP, limits, s.log)
}
