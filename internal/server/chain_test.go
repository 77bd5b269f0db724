package server

import (
	"context"
	"slices"
	"strings"
	"testing"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/server/authz"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
	"github.com/contentbackup/contentbackup/internal/transport"
)

// TestInterceptorChainOrder: the chain is authz, logging, metrics,
// reasons, recovery, outermost first (chain.go says why), and the order
// does what it is for: a handler's panic is turned into INTERNAL inside
// metrics and logging, which both record the call with that code, never
// escapes, and reaches the caller with its reason (reasons is outside
// recovery).
func TestInterceptorChainOrder(t *testing.T) {
	authorizer := authz.New(authz.Config{})
	panicHandler := recovery.WithRecoveryHandlerContext(func(context.Context, any) error { return status.Error(codes.Internal, "internal error") })
	names := func(stages []stage) []string {
		var out []string
		for _, s := range stages {
			out = append(out, s.name)
		}
		return out
	}
	if got := names(chain(authorizer, interceptorLogger(zap.NewNop()), nil, nil, nil, panicHandler)); !slices.Equal(got, []string{"authz", "logging", "reasons", "recovery"}) {
		t.Fatalf("the chain without metrics: %v", got)
	}
	reg := prometheus.NewRegistry()
	metrics := grpcprom.NewServerMetrics()
	reg.MustRegister(metrics)
	core, logs := observer.New(zap.DebugLevel)
	stages := chain(authorizer, interceptorLogger(zap.New(core)), []logging.Option{logging.WithLogOnEvents(logging.FinishCall)}, metrics, nil, panicHandler)
	if got := names(stages); !slices.Equal(got, []string{"authz", "logging", "metrics", "reasons", "recovery"}) {
		t.Fatalf("the chain: %v", got)
	}
	// Below authz (which needs a caller), the rest as gRPC runs them.
	unary, _ := interceptors(stages[1:])
	info := &grpc.UnaryServerInfo{FullMethod: "/contentbackup.v1.ContentService/Decode"}
	h := grpc.UnaryHandler(func(context.Context, any) (any, error) { panic("a handler's bug") })
	for i := len(unary) - 1; i >= 0; i-- {
		next, ic := h, unary[i]
		h = func(ctx context.Context, req any) (any, error) { return ic(ctx, req, info, next) }
	}
	_, err := h(t.Context(), nil)
	if status.Code(err) != codes.Internal {
		t.Fatalf("a panicking handler: %v, want INTERNAL", err)
	}
	if got := reason(err); got != "INTERNAL" {
		t.Errorf("a panicking handler's reason: %q, want INTERNAL", got)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counted := false
	for _, mf := range mfs {
		if mf.GetName() != "grpc_server_handled_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "grpc_code" && l.GetValue() == "Internal" && m.GetCounter().GetValue() == 1 {
					counted = true
				}
			}
		}
	}
	if !counted {
		t.Error("metrics did not count the panic as INTERNAL: recovery is not inside it")
	}
	logged := false
	for _, e := range logs.All() {
		if strings.Contains(e.Message, "finished call") && e.ContextMap()["grpc.code"] == "Internal" {
			logged = true
		}
	}
	if !logged {
		t.Errorf("logging did not record the call as INTERNAL: %v", logs.All())
	}
}

// TestCallErrorsCountedByReason: a call that ends with an error is
// counted in contentbackup_call_errors_total by its method and the
// ErrorInfo reason its caller read (the dashboard's and the alerts'
// source for memory-budget refusals and server faults).
func TestCallErrorsCountedByReason(t *testing.T) {
	reg := prometheus.NewRegistry()
	addr := serveTCP(t, Config{Store: enginetest.SQLite(t), Metrics: reg}, nil)
	conn := dial(t, addr, transport.ClientOptions{Insecure: true, Token: testAdminToken})
	_, err := cb.NewConversationServiceClient(conn).GetGroup(t.Context(), &cb.GetGroupRequest{Owner: "alice", GroupId: storetest.GroupID("none")})
	reason := ""
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			reason = info.GetReason()
		}
	}
	if err == nil || reason == "" {
		t.Fatalf("GetGroup of a group the owner lacks: %v, reason %q", err, reason)
	}
	m := series(t, reg, "contentbackup_call_errors_total", map[string]string{"grpc_method": "GetGroup", "reason": reason})
	if m.GetCounter().GetValue() != 1 {
		t.Errorf("contentbackup_call_errors_total{GetGroup, %s} = %v, want 1", reason, m.GetCounter().GetValue())
	}
}
