package authz

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/auth"
	"github.com/contentbackup/contentbackup/internal/server/requestid"
)

// testPolicy: one principal per rule the table below exercises, each
// proven by the token that is its name.
const testPolicy = `
principals:
  - {name: reader, tokens_sha256: [%reader%], scopes: [conversations.read], owners: [alice]}
  - {name: writer, tokens_sha256: [%writer%], scopes: [conversations.write], owners: [alice]}
  - {name: anysender, tokens_sha256: [%anysender%], scopes: [conversations.write, conversations.write.any_sender], owners: [alice]}
  - {name: importer, tokens_sha256: [%importer%], scopes: [archive.import], owners: [alice, bob]}
  - {name: narrow, tokens_sha256: [%narrow%], scopes: [archive.import, archive.migrate], owners: [alice]}
  - {name: migrator, tokens_sha256: [%migrator%], scopes: [archive.import, archive.migrate], owners: [alice, bob]}
  - {name: relay, certificates: [CN=relay], scopes: [content], owners: [alice]}
`

func testAuthorizer(t *testing.T, publicReflection bool, denied func(string)) *Authorizer {
	t.Helper()
	yaml := testPolicy
	for _, name := range []string{"reader", "writer", "anysender", "importer", "narrow", "migrator"} {
		yaml = strings.ReplaceAll(yaml, "%"+name+"%", auth.TokenDigest(name))
	}
	pol, err := auth.ParsePolicy([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	authn, err := auth.NewAuthenticator(auth.StaticPolicy(pol), nil)
	if err != nil {
		t.Fatal(err)
	}
	return New(Config{Authn: authn, PublicReflection: publicReflection, Denied: denied})
}

func withToken(token string) context.Context {
	md := metadata.MD{}
	if token != "" {
		md.Set("authorization", "Bearer "+token)
	}
	return metadata.NewIncomingContext(context.Background(), md)
}

// TestAuthorizerDecides: each rule of the authorizer, for a unary call,
// decides the call's code and the words of its refusal; the handler runs
// only for an admitted call.
func TestAuthorizerDecides(t *testing.T) {
	reflect := "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
	twoHeaders := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer reader", "authorization", "Bearer reader"))
	for _, c := range []struct {
		name    string
		ctx     context.Context
		method  string
		req     any
		public  bool
		code    codes.Code
		says    string
		refused string // the reason counted, "" when admitted
	}{
		{"health, anonymous", withToken(""), "/grpc.health.v1.Health/Check", nil, false, codes.OK, "", ""},
		{"reflection, anonymous, public", withToken(""), reflect, nil, true, codes.OK, "", ""},
		{"reflection, anonymous, not public", withToken(""), reflect, nil, false, codes.Unauthenticated, "", "unauthenticated"},
		{"reflection, any principal", withToken("reader"), reflect, nil, false, codes.OK, "", ""},
		{"anonymous", withToken(""), cb.ConversationService_GetGroup_FullMethodName, &cb.GetGroupRequest{Owner: "alice"}, false, codes.Unauthenticated, "", "unauthenticated"},
		{"two authorization headers", twoHeaders, cb.ConversationService_GetGroup_FullMethodName, &cb.GetGroupRequest{Owner: "alice"}, false, codes.Unauthenticated, "more than one authorization header", "unauthenticated"},
		{"a method no rule names", withToken("reader"), "/contentbackup.v1.ConversationService/Unlisted", nil, false, codes.PermissionDenied, "not open to any scope", ""},
		{"the method's scope", withToken("reader"), cb.ConversationService_GetGroup_FullMethodName, &cb.GetGroupRequest{Owner: "alice"}, false, codes.OK, "", ""},
		{"another scope", withToken("reader"), cb.ConversationService_PutGroup_FullMethodName, &cb.PutGroupRequest{Owner: "alice"}, false, codes.PermissionDenied, "lacks the scope conversations.write", "scope"},
		{"either scope of two", withToken("importer"), cb.BackupService_ListBackups_FullMethodName, &cb.ListBackupsRequest{Owner: "bob"}, false, codes.OK, "", ""},
		{"another owner", withToken("reader"), cb.ConversationService_GetGroup_FullMethodName, &cb.GetGroupRequest{Owner: "bob"}, false, codes.PermissionDenied, "may not act for this owner", "owner"},
		{"no owner named", withToken("reader"), cb.ConversationService_GetGroup_FullMethodName, &cb.GetGroupRequest{}, false, codes.OK, "", ""},
		{"sender the owner", withToken("writer"), cb.ConversationService_AppendMessages_FullMethodName,
			&cb.AppendMessagesRequest{Owner: "alice", Messages: []*mb.GroupMessageSave{{SenderInboxId: "alice"}}}, false, codes.OK, "", ""},
		{"sender another", withToken("writer"), cb.ConversationService_AppendMessages_FullMethodName,
			&cb.AppendMessagesRequest{Owner: "alice", Messages: []*mb.GroupMessageSave{{SenderInboxId: "alice"}, {SenderInboxId: "mallory"}}}, false, codes.PermissionDenied, "messages[1].sender_inbox_id", "actor"},
		{"sender another, granted", withToken("anysender"), cb.ConversationService_AppendMessages_FullMethodName,
			&cb.AppendMessagesRequest{Owner: "alice", Messages: []*mb.GroupMessageSave{{SenderInboxId: "mallory"}}}, false, codes.OK, "", ""},
		{"delete as another", withToken("writer"), cb.ConversationService_DeleteMessage_FullMethodName, &cb.DeleteMessageRequest{Owner: "alice", ActorInboxId: "mallory"}, false, codes.PermissionDenied, "actor_inbox_id", "actor"},
		{"delete as the owner", withToken("writer"), cb.ConversationService_DeleteMessage_FullMethodName, &cb.DeleteMessageRequest{Owner: "alice", ActorInboxId: "alice"}, false, codes.OK, "", ""},
		{"restore one's own", withToken("importer"), cb.BackupService_StartImport_FullMethodName, &cb.StartImportRequest{Owner: "alice", SourceOwner: "alice"}, false, codes.OK, "", ""},
		{"restore another's, no migrate", withToken("importer"), cb.BackupService_StartImport_FullMethodName, &cb.StartImportRequest{Owner: "alice", SourceOwner: "bob"}, false, codes.PermissionDenied, "needs the scope archive.migrate", "actor"},
		{"restore another's not held", withToken("narrow"), cb.BackupService_StartImport_FullMethodName, &cb.StartImportRequest{Owner: "alice", SourceOwner: "bob"}, false, codes.PermissionDenied, "source_owner", "actor"},
		{"migrate", withToken("migrator"), cb.BackupService_StartImport_FullMethodName, &cb.StartImportRequest{Owner: "alice", SourceOwner: "bob"}, false, codes.OK, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var reasons []string
			a := testAuthorizer(t, c.public, func(r string) { reasons = append(reasons, r) })
			ran := false
			ctx, id := requestid.With(c.ctx)
			_, err := a.Unary(ctx, c.req, &grpc.UnaryServerInfo{FullMethod: c.method}, func(context.Context, any) (any, error) {
				ran = true
				return nil, nil
			})
			st := status.Convert(err)
			if st.Code() != c.code || !strings.Contains(st.Message(), c.says) {
				t.Fatalf("got %v %q; want %v saying %q", st.Code(), st.Message(), c.code, c.says)
			}
			// A refusal says its reason (ErrorInfo) and its call's request
			// id (RequestInfo), however it was refused.
			if c.code != codes.OK {
				want := map[string]string{"unauthenticated": ReasonUnauthenticated, "scope": ReasonScopeMissing, "owner": ReasonOwnerNotAllowed,
					"actor": ReasonActorNotAllowed, "": ReasonMethodNotOpen}[c.refused]
				var reason, gotID string
				for _, d := range st.Details() {
					switch d := d.(type) {
					case *errdetails.ErrorInfo:
						if d.GetDomain() == ErrorDomain {
							reason = d.GetReason()
						}
					case *errdetails.RequestInfo:
						gotID = d.GetRequestId()
					}
				}
				if reason != want || gotID != id {
					t.Errorf("refusal details: reason %q, request id %q; want %q and %q", reason, gotID, want, id)
				}
			}
			if ran != (c.code == codes.OK) {
				t.Errorf("handler ran: %v, for %v", ran, c.code)
			}
			if want := c.refused; (want == "" && len(reasons) != 0) || (want != "" && (len(reasons) != 1 || reasons[0] != want)) {
				t.Errorf("refusals counted %v; want %q", reasons, want)
			}
		})
	}
}

// A call that arrives with no request id gets one, and its refusal says
// it, with its reason.
func TestRefusalGetsARequestID(t *testing.T) {
	a := testAuthorizer(t, false, nil)
	_, err := a.Unary(withToken("reader"), &cb.GetGroupRequest{Owner: "bob"}, &grpc.UnaryServerInfo{FullMethod: cb.ConversationService_GetGroup_FullMethodName},
		func(context.Context, any) (any, error) { return nil, nil })
	var reason, id string
	for _, d := range status.Convert(err).Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			reason = d.GetReason()
		case *errdetails.RequestInfo:
			id = d.GetRequestId()
		}
	}
	if reason != ReasonOwnerNotAllowed || len(id) != 24 {
		t.Fatalf("refusal: %v; want OWNER_NOT_PERMITTED and a request id of its own", err)
	}
}

// TestAuthorizerWithoutAuthentication: with no authenticator, only health
// is served.
func TestAuthorizerWithoutAuthentication(t *testing.T) {
	a := New(Config{})
	_, err := a.Unary(withToken("reader"), &cb.GetGroupRequest{Owner: "alice"}, &grpc.UnaryServerInfo{FullMethod: cb.ConversationService_GetGroup_FullMethodName}, func(context.Context, any) (any, error) { return nil, nil })
	if st := status.Convert(err); st.Code() != codes.Unauthenticated || !strings.Contains(st.Message(), "no authentication is configured") {
		t.Errorf("no authenticator: %v", err)
	}
	if _, err := a.Unary(withToken(""), nil, &grpc.UnaryServerInfo{FullMethod: "/grpc.health.v1.Health/Check"}, func(context.Context, any) (any, error) { return nil, nil }); err != nil {
		t.Errorf("health without an authenticator: %v", err)
	}
}

// TestAdmitHTTP: the HTTP listener's door proves callers as the gRPC one
// does: by the token, or by the certificate TLS verified (never by one it
// did not), with health and public reflection open.
func TestAdmitHTTP(t *testing.T) {
	relay := &x509.Certificate{Subject: pkix.Name{CommonName: "relay"}}
	req := func(path, token string, verified *x509.Certificate, presented ...*x509.Certificate) *http.Request {
		r := httptest.NewRequest(http.MethodPost, path, nil)
		if token != "" {
			r.Header.Add("Authorization", "Bearer "+token)
		}
		if verified != nil || len(presented) > 0 {
			r.TLS = &tls.ConnectionState{PeerCertificates: presented}
			if verified != nil {
				r.TLS.VerifiedChains = [][]*x509.Certificate{{verified}}
			}
		}
		return r
	}
	emptyChain := req(cb.ContentService_Decode_FullMethodName, "", nil, relay)
	emptyChain.TLS.VerifiedChains = [][]*x509.Certificate{{}}
	twice := req(cb.ContentService_Decode_FullMethodName, "reader", nil)
	twice.Header.Add("Authorization", "Bearer reader")
	for _, c := range []struct {
		name   string
		r      *http.Request
		public bool
		ok     bool
	}{
		{"health", req("/grpc.health.v1.Health/Check", "", nil), false, true},
		{"reflection, public", req("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", "", nil), true, true},
		{"reflection v1alpha, public", req("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", "", nil), true, true},
		{"reflection v1alpha, not public", req("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", "", nil), false, false},
		{"reflection, not public", req("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", "", nil), false, false},
		{"anonymous", req(cb.ContentService_Decode_FullMethodName, "", nil), false, false},
		{"a token", req(cb.ContentService_Decode_FullMethodName, "reader", nil), false, true},
		{"an unknown token", req(cb.ContentService_Decode_FullMethodName, "nobody", nil), false, false},
		{"two headers", twice, false, false},
		{"a verified certificate", req(cb.ContentService_Decode_FullMethodName, "", relay), false, true},
		{"a certificate TLS did not verify", req(cb.ContentService_Decode_FullMethodName, "", nil, relay), false, false},
		{"an empty verified chain", emptyChain, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			admitted, who, err := testAuthorizer(t, c.public, nil).AdmitHTTP(c.r)
			if (err == nil) != c.ok {
				t.Errorf("admitted: %v (%v); want %v", err == nil, err, c.ok)
			}
			// The request served carries the principal the door proved
			// (or, on an open path, nothing), so the call behind it is
			// not proven again.
			if c.ok && who != "" {
				if p, ok := admitted.Context().Value(provenKey{}).(*auth.Principal); !ok || p.Name != who {
					t.Errorf("the admitted request carries %v, want principal %q", admitted.Context().Value(provenKey{}), who)
				}
			}
			// A proven caller is named, so the door can bound each one's
			// places; an open path names nobody.
			if c.ok && (who == "") != (ServiceOf(c.r.URL.Path) == HealthService || ServiceOf(c.r.URL.Path) == reflectionV1 || ServiceOf(c.r.URL.Path) == reflectionV1Alpha) {
				t.Errorf("admitted as %q", who)
			}
		})
	}
	if _, _, err := New(Config{}).AdmitHTTP(req(cb.ContentService_Decode_FullMethodName, "reader", nil)); err == nil || !strings.Contains(err.Error(), "no authentication is configured") {
		t.Errorf("no authenticator: %v", err)
	}
}

// TestCredentialsProvedOncePerCall (issue 48): each way in verifies a
// call's credentials once and says where (Proved): a gRPC call's on its
// headers (the tap), whose interceptor then verifies nothing; an
// HTTP/JSON call's at the door, whose call behind it verifies nothing; a
// call the tap did not see, in the interceptor ("call"). A refused
// credential is counted as a refusal, not as proved.
func TestCredentialsProvedOncePerCall(t *testing.T) {
	var proved []string
	a := testAuthorizer(t, false, nil)
	a.proved = func(where string) { proved = append(proved, where) }
	method := cb.ConversationService_GetGroup_FullMethodName
	req := &cb.GetGroupRequest{Owner: "alice"}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	info := &grpc.UnaryServerInfo{FullMethod: method}

	// The tap, then the interceptor on the stream's context.
	tapped, err := a.Tap(context.Background(), &tap.Info{FullMethodName: method, Header: metadata.Pairs("authorization", "Bearer reader")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Unary(tapped, req, info, handler); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(proved, []string{"tap"}) {
		t.Errorf("a tapped gRPC call: proved %v, want [tap]", proved)
	}

	// The door, then the interceptor on the admitted request's context
	// (the transcoded call inherits it).
	proved = nil
	r := httptest.NewRequest(http.MethodPost, method, nil)
	r.Header.Set("Authorization", "Bearer reader")
	admitted, _, err := a.AdmitHTTP(r)
	if err != nil {
		t.Fatal(err)
	}
	behind := metadata.NewIncomingContext(admitted.Context(), metadata.Pairs("authorization", "Bearer reader"))
	if _, err := a.Unary(behind, req, info, handler); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(proved, []string{"http"}) {
		t.Errorf("an HTTP/JSON call: proved %v, want [http]", proved)
	}

	// A call no tap saw, and one with credentials that do not verify.
	proved = nil
	if _, err := a.Unary(withToken("reader"), req, info, handler); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Unary(withToken("nobody"), req, info, handler); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("an unknown token: %v", err)
	}
	if !slices.Equal(proved, []string{"call"}) {
		t.Errorf("an untapped call and a refused one: proved %v, want [call]", proved)
	}
}
