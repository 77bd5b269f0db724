package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jwt"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/timestamppb"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/auth"
	"github.com/contentbackup/contentbackup/internal/auth/authtest"
	"github.com/contentbackup/contentbackup/internal/devpki"
	"github.com/contentbackup/contentbackup/internal/jobs"
	"github.com/contentbackup/contentbackup/internal/server/authz"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
	"github.com/contentbackup/contentbackup/internal/transport"
)

// The perimeter's principals. alice may do everything for the owner
// alice; exporter may only export alice; ops may do everything.
const (
	opsToken      = "ops-token-0123456789"
	aliceToken    = "alice-token-0123456789"
	exporterToken = "exporter-token-0123456789"
	jwtIssuer     = "https://idp.test"
	jwtAudience   = "contentbackup"
)

func perimeterPolicy(withAlice bool) string {
	p := `
principals:
  - name: ops
    tokens_sha256: [` + auth.TokenDigest(opsToken) + `]
    scopes: [admin]
    owners: ["*"]
  - name: exporter
    tokens_sha256: [` + auth.TokenDigest(exporterToken) + `]
    scopes: [archive.export]
    owners: [alice]
  - name: relay
    certificates: ["CN=relay.test"]
    scopes: [conversations.read, conversations.write, conversations.write.any_sender]
    owners: [alice, bob]
  - name: bob-device
    certificates: ["spiffe://test/bob"]
    scopes: [conversations.read, conversations.write]
    owners: [bob]
`
	if withAlice {
		p += `  - name: alice
    tokens_sha256: [` + auth.TokenDigest(aliceToken) + `]
    scopes: [content, conversations.read, conversations.write, archive.export, archive.import, owners.erase, owners.hold]
    owners: [alice]
`
	}
	return p
}

// pki is a CA with the server's certificate and two client certificates
// on disk, and a second CA nobody trusts.
type pki struct {
	dir                   string
	caFile                string
	serverCert, serverKey string
	relayCert, relayKey   string // CN=relay.test: in the policy
	bobCert, bobKey       string // URI SAN spiffe://test/bob: in the policy
	nobodyCert, nobodyKey string // signed by the CA, in no policy
	rogueCert, rogueKey   string // signed by another CA
	ca                    *devpki.CA
}

func newPKI(t testing.TB) *pki {
	t.Helper()
	dir := t.TempDir()
	ca, err := devpki.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	rogueCA, err := devpki.NewCA("rogue CA")
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	issue := func(c *devpki.CA, name string, l devpki.Leaf) (string, string) {
		cert, key, err := c.Issue(l)
		if err != nil {
			t.Fatal(err)
		}
		return write(name+".crt", cert), write(name+".key", key)
	}
	p := &pki{dir: dir, ca: ca, caFile: write("ca.crt", ca.CertPEM)}
	p.serverCert, p.serverKey = issue(ca, "server", devpki.Leaf{CommonName: "server-1", DNSNames: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	p.relayCert, p.relayKey = issue(ca, "relay", devpki.Leaf{CommonName: "relay.test", Client: true})
	p.bobCert, p.bobKey = issue(ca, "bob", devpki.Leaf{CommonName: "bob-phone", URIs: []string{"spiffe://test/bob"}, Client: true})
	p.nobodyCert, p.nobodyKey = issue(ca, "nobody", devpki.Leaf{CommonName: "nobody.test", Client: true})
	p.rogueCert, p.rogueKey = issue(rogueCA, "rogue", devpki.Leaf{CommonName: "relay.test", Client: true})
	return p
}

// idp is an identity provider: a signing key, its JWKS on disk.
type idp struct {
	key      jwk.Key
	jwksFile string
}

func newIDP(t testing.TB) *idp {
	t.Helper()
	key, pub := authtest.NewKey(t, "k1")
	f := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(f, authtest.JWKS(t, pub), 0o600); err != nil {
		t.Fatal(err)
	}
	return &idp{key: key, jwksFile: f}
}

type claims struct {
	iss, aud, sub string
	exp           time.Time
	owner         any
	scope         string
}

func (i *idp) token(t testing.TB, c claims) string {
	t.Helper()
	b := jwt.NewBuilder().Issuer(c.iss).Audience([]string{c.aud}).Subject(c.sub).Expiration(c.exp).IssuedAt(time.Now().Add(-2 * time.Hour))
	if c.owner != nil {
		b = b.Claim("owner", c.owner)
	}
	return authtest.Sign(t, i.key, b.Claim("scope", c.scope))
}

func (i *idp) valid(t testing.TB, owner, scope string) string {
	return i.token(t, claims{iss: jwtIssuer, aud: jwtAudience, sub: "user-" + owner, exp: time.Now().Add(time.Hour), owner: owner, scope: scope})
}

// perimeter is a server behind TLS (or mutual TLS) with the perimeter
// policy and JWTs, on one engine.
type perimeter struct {
	addr       string
	pki        *pki
	idp        *idp
	policyFile string
	policy     *auth.PolicySource
	store      store.Store
	mtls       bool
	// jobsDir is the directory of the jobs' file bucket "local".
	jobsDir string
	// jobs is the server's job manager, for a test that runs its key
	// worker's pass.
	jobs *jobs.Manager
}

func (p *perimeter) dial(t testing.TB, o transport.ClientOptions) *grpc.ClientConn {
	t.Helper()
	o.CAFile, o.ServerName = p.pki.caFile, "localhost"
	return dial(t, p.addr, o)
}

// as dials with a bearer token.
func (p *perimeter) as(t testing.TB, token string) *grpc.ClientConn {
	return p.dial(t, transport.ClientOptions{Token: token})
}

// forEachPerimeter runs fn against a server on each engine, once with TLS
// and once with mutual TLS (client certificates verified if given).
func forEachPerimeter(t *testing.T, fn func(t *testing.T, p *perimeter)) {
	for _, e := range enginetest.Engines() {
		for _, mode := range []string{"tls", "mtls"} {
			t.Run(e.Name+"/"+mode, func(t *testing.T) {
				fn(t, startPerimeter(t, e.Open(t), mode == "mtls", nil))
			})
		}
	}
}

func startPerimeter(t testing.TB, s store.Store, mtls bool, log *zap.Logger) *perimeter {
	t.Helper()
	p := &perimeter{pki: newPKI(t), idp: newIDP(t), store: s, mtls: mtls}
	p.policyFile = filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(p.policyFile, []byte(perimeterPolicy(true)), 0o600); err != nil {
		t.Fatal(err)
	}
	if log == nil {
		log = zap.NewNop()
	}
	var err error
	if p.policy, err = auth.LoadPolicy(p.policyFile, log); err != nil {
		t.Fatal(err)
	}
	jv, err := auth.NewJWTVerifier(t.Context(), auth.JWTConfig{JWKS: p.idp.jwksFile, Issuer: jwtIssuer, Audience: jwtAudience}, log)
	if err != nil {
		t.Fatal(err)
	}
	authn, err := auth.NewAuthenticator(p.policy, jv)
	if err != nil {
		t.Fatal(err)
	}
	files := transport.ServerFiles{CertFile: p.pki.serverCert, KeyFile: p.pki.serverKey, Refresh: 50 * time.Millisecond}
	if mtls {
		files.ClientCAFile = p.pki.caFile
	}
	creds, stop, err := transport.ServerCredentials(t.Context(), files)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	jobsCfg, jobsDir := testJobs(t)
	p.jobsDir = jobsDir
	cfg := withJobs(Config{Store: s, Auth: authn, Credentials: creds}, jobsCfg)
	p.jobs = cfg.Jobs
	p.addr = serveTCP(t, cfg, log)
	return p
}

func wantStatus(t *testing.T, what string, err error, code codes.Code) {
	t.Helper()
	if got := status.Code(err); got != code {
		t.Errorf("%s: %v; want %v", what, err, code)
	}
}

// snapshotOf reads everything an owner holds, as the operator.
func snapshotOf(t *testing.T, p *perimeter, owner string) string {
	t.Helper()
	g, m, c := everything(t, cb.NewConversationServiceClient(p.as(t, opsToken)), owner)
	b, err := json.Marshal([]any{g, m, c})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestPerimeterUnauthenticated(t *testing.T) {
	forEachPerimeter(t, func(t *testing.T, p *perimeter) {
		ctx := t.Context()
		populate(t, cb.NewConversationServiceClient(p.as(t, opsToken)), "bob")
		before := snapshotOf(t, p, "bob")

		anon := p.dial(t, transport.ClientOptions{})
		// Health is open to everyone, so probes and load balancers work.
		if resp, err := healthpb.NewHealthClient(anon).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health without credentials: %v %v", resp, err)
		}
		// Reflection is not, unless configured.
		refl, err := reflectionpb.NewServerReflectionClient(anon).ServerReflectionInfo(ctx)
		if err == nil {
			_ = refl.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
			_, err = refl.Recv()
		}
		wantStatus(t, "reflection without credentials", err, codes.Unauthenticated)

		for name, conn := range map[string]*grpc.ClientConn{
			"no credential":                    anon,
			"wrong token":                      p.as(t, "not-a-token-anyone-holds"),
			"a JWT-shaped token nobody signed": p.as(t, "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0."),
		} {
			_, err := cb.NewConversationServiceClient(conn).PutGroup(ctx, &cb.PutGroupRequest{Owner: "bob", Group: storetest.FullGroup("forged")})
			wantStatus(t, name+": PutGroup", err, codes.Unauthenticated)
			_, err = cb.NewContentServiceClient(conn).Decode(ctx, &cb.DecodeRequest{EncodedContent: textEnvelope(t, "x")})
			wantStatus(t, name+": Decode", err, codes.Unauthenticated)
			stream, err := cb.NewArchiveServiceClient(conn).Export(ctx, &cb.ExportRequest{Owner: "bob", Key: archiveKey})
			if err == nil {
				_, err = stream.Recv()
			}
			wantStatus(t, name+": Export", err, codes.Unauthenticated)
			if err != nil && strings.Contains(status.Convert(err).Message(), "not-a-token") {
				t.Errorf("%s: the error echoes the token: %v", name, err)
			}
		}
		if after := snapshotOf(t, p, "bob"); after != before {
			t.Errorf("refused calls changed bob's data")
		}
	})
}

func TestPerimeterJWT(t *testing.T) {
	forEachPerimeter(t, func(t *testing.T, p *perimeter) {
		ctx := t.Context()
		ops := cb.NewConversationServiceClient(p.as(t, opsToken))
		populate(t, ops, "bob")
		before := snapshotOf(t, p, "bob")
		scope := "conversations.read conversations.write other-service.read"
		good := p.idp.valid(t, "alice", scope)
		if _, err := cb.NewConversationServiceClient(p.as(t, good)).PutGroup(ctx, &cb.PutGroupRequest{Owner: "alice", Group: storetest.FullGroup("ga")}); err != nil {
			t.Fatalf("a valid JWT for alice: %v", err)
		}
		other := newIDP(t) // the same claims signed by a key not in the JWKS
		for name, tc := range map[string]struct {
			token string
			code  codes.Code
		}{
			"expired":         {p.idp.token(t, claims{iss: jwtIssuer, aud: jwtAudience, sub: "u", exp: time.Now().Add(-time.Hour), owner: "bob", scope: scope}), codes.Unauthenticated},
			"wrong audience":  {p.idp.token(t, claims{iss: jwtIssuer, aud: "another-service", sub: "u", exp: time.Now().Add(time.Hour), owner: "bob", scope: scope}), codes.Unauthenticated},
			"wrong issuer":    {p.idp.token(t, claims{iss: "https://evil.test", aud: jwtAudience, sub: "u", exp: time.Now().Add(time.Hour), owner: "bob", scope: scope}), codes.Unauthenticated},
			"unknown key":     {other.valid(t, "bob", scope), codes.Unauthenticated},
			"every owner (*)": {p.idp.valid(t, "*", scope), codes.Unauthenticated},
			"owner alice":     {good, codes.PermissionDenied},
			"no write scope":  {p.idp.valid(t, "bob", "conversations.read"), codes.PermissionDenied},
		} {
			_, err := cb.NewConversationServiceClient(p.as(t, tc.token)).PutGroup(ctx, &cb.PutGroupRequest{Owner: "bob", Group: storetest.FullGroup("forged")})
			wantStatus(t, name, err, tc.code)
		}
		if after := snapshotOf(t, p, "bob"); after != before {
			t.Errorf("refused JWT calls changed bob's data")
		}
		if _, err := ops.GetGroup(ctx, &cb.GetGroupRequest{Owner: "alice", GroupId: storetest.GroupID("ga")}); err != nil {
			t.Errorf("the valid JWT's write is not there: %v", err)
		}
	})
}

// TestPerimeterPolicyReloadRevokes: a token removed from the policy file
// stops working at the next reload, with no restart.
func TestPerimeterPolicyReloadRevokes(t *testing.T) {
	forEachPerimeter(t, func(t *testing.T, p *perimeter) {
		ctx := t.Context()
		alice := cb.NewConversationServiceClient(p.as(t, aliceToken))
		put(t, alice, "alice", storetest.FullGroup("g1"))
		if err := os.WriteFile(p.policyFile, []byte(perimeterPolicy(false)), 0o600); err != nil {
			t.Fatal(err)
		}
		if changed, err := p.policy.Reload(); err != nil || !changed {
			t.Fatalf("reload: %v %v", changed, err)
		}
		_, err := alice.PutGroup(ctx, &cb.PutGroupRequest{Owner: "alice", Group: storetest.FullGroup("g2")})
		wantStatus(t, "PutGroup with a revoked token", err, codes.Unauthenticated)
		_, err = alice.GetGroup(ctx, &cb.GetGroupRequest{Owner: "alice", GroupId: storetest.GroupID("g1")})
		wantStatus(t, "GetGroup with a revoked token", err, codes.Unauthenticated)
		ops := cb.NewConversationServiceClient(p.as(t, opsToken))
		_, err = ops.GetGroup(ctx, &cb.GetGroupRequest{Owner: "alice", GroupId: storetest.GroupID("g2")})
		wantStatus(t, "the revoked token's write", err, codes.NotFound)

		// A policy that does not parse leaves the one in force.
		if err := os.WriteFile(p.policyFile, []byte("principals: [{name: x, scopes: [root]}]"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := p.policy.Reload(); err == nil {
			t.Error("a policy with an unknown scope loaded")
		}
		if _, err := ops.GetGroup(ctx, &cb.GetGroupRequest{Owner: "alice", GroupId: storetest.GroupID("g1")}); err != nil {
			t.Errorf("ops after a failed reload: %v", err)
		}
	})
}

// TestPerimeterRevokeLastCredential: removing a principal's only token
// digest (its entry kept, with no credential) is a policy that loads: the
// token is UNAUTHENTICATED at once, and the policy's status says so. A
// reload that is refused is visible in the status, not only in a log.
func TestPerimeterRevokeLastCredential(t *testing.T) {
	p := startPerimeter(t, enginetest.SQLite(t), false, nil)
	ctx := t.Context()
	alice := cb.NewConversationServiceClient(p.as(t, aliceToken))
	put(t, alice, "alice", storetest.FullGroup("g1"))
	revoked := strings.Replace(perimeterPolicy(true), "tokens_sha256: ["+auth.TokenDigest(aliceToken)+"]", "tokens_sha256: []", 1)
	if revoked == perimeterPolicy(true) {
		t.Fatal("the policy has no alice digest to remove")
	}
	if disabled, err := auth.CheckPolicyFile(writeTemp(t, revoked)); err != nil || len(disabled) != 1 || disabled[0] != "alice" {
		t.Fatalf("CheckPolicyFile of the revoking policy: %v, %v; want alice disabled", disabled, err)
	}
	if err := os.WriteFile(p.policyFile, []byte(revoked), 0o600); err != nil {
		t.Fatal(err)
	}
	if changed, err := p.policy.Reload(); err != nil || !changed {
		t.Fatalf("reload of a policy revoking alice's last digest: %v %v", changed, err)
	}
	_, err := alice.GetGroup(ctx, &cb.GetGroupRequest{Owner: "alice", GroupId: storetest.GroupID("g1")})
	wantStatus(t, "GetGroup with alice's revoked token", err, codes.Unauthenticated)
	if st := p.policy.Status(); st.Failing != "" || st.Failures != 0 || st.LoadedAt.IsZero() {
		t.Errorf("status after a good reload: %+v", st)
	}
	if err := os.WriteFile(p.policyFile, []byte("principals: [{name: x, scopes: [root]}]"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := p.policy.Reload(); err == nil {
		t.Fatal("a policy with an unknown scope loaded")
	}
	if st := p.policy.Status(); st.Failures != 1 || !strings.Contains(st.Failing, "unknown scope") {
		t.Errorf("status after a refused reload: %+v; want it failing, counted", st)
	}
	if _, err := auth.CheckPolicyFile(p.policyFile); err == nil {
		t.Error("CheckPolicyFile passed a policy with an unknown scope")
	}
}

func writeTemp(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// ownerCall is one RPC that names an owner, called for owner.
type ownerCall func(ctx context.Context, conn *grpc.ClientConn, owner string) error

// ownerCalls has a row for every RPC whose request names an owner;
// TestPerimeterEveryOwnerRPCHasARow fails when an RPC is added without one.
func ownerCalls(t *testing.T) map[string]ownerCall {
	group := storetest.GroupID("group-1")
	return map[string]ownerCall{
		cb.ConversationService_PutGroup_FullMethodName: func(ctx context.Context, c *grpc.ClientConn, o string) error {
			_, err := cb.NewConversationServiceClient(c).PutGroup(ctx, &cb.PutGroupRequest{Owner: o, Group: storetest.FullGroup("group-1")})
			return err
		},
		cb.ConversationService_GetGroup_FullMethodName: func(ctx context.Context, c *grpc.ClientConn, o string) error {
			_, err := cb.NewConversationServiceClient(c).GetGroup(ctx, &cb.GetGroupRequest{Owner: o, GroupId: group})
			return err
		},
		cb.ConversationService_ListGroups_FullMethodName: func(ctx context.Context, c *grpc.ClientConn, o string) error {
			_, err := cb.NewConversationServiceClient(c).ListGroups(ctx, &cb.ListGroupsRequest{Owner: o})
			return err
		},
		cb.ConversationService_AppendMessages_FullMethodName: func(ctx context.Context, c *grpc.ClientConn, o string) error {
			m := storetest.Message("forged", group, 99)
			m.SenderInboxId = o
			_, err := cb.NewConversationServiceClient(c).AppendMessages(ctx, &cb.AppendMessagesRequest{Owner: o, Messages: []*mb.GroupMessageSave{m}})
			return err
		},
		cb.ConversationService_ListMessages_FullMethodName: func(ctx context.Context, c *grpc.ClientConn, o string) error {
			_, err := cb.NewConversationServiceClient(c).ListMessages(ctx, &cb.ListMessagesRequest{Owner: o, GroupId: group})
			return err
		},
		cb.ConversationService_StreamMessages_FullMethodName: func(ctx context.Context, c *grpc.ClientConn, o string) error {
			stream, err := cb.NewConversationServiceClient(c).StreamMessages(ctx, &cb.StreamMessagesRequest{Owner: o, GroupId: group})
			if err != nil {
				return err
			}
			_, err = stream.Recv()
			return err
		},
		cb.ConversationService_DeleteMessage_FullMethodName: func(ctx context.Context, c *grpc.ClientConn, o string) error {
			_, err := cb.NewConversationServiceClient(c).DeleteMessage(ctx, &cb.DeleteMessageRequest{Owner: o, GroupId: group, MessageId: []byte("m0"), ActorInboxId: o})
			return err
		},
		cb.ConversationService_SetConsent_FullMethodName: func(ctx context.Context, c *grpc.ClientConn, o string) error {
			_, err := cb.NewConversationServiceClient(c).SetConsent(ctx, &cb.SetConsentRequest{Owner: o, Records: []*cs.ConsentSave{
				storetest.Consent("inbox-x", cs.ConsentStateSave_CONSENT_STATE_SAVE_DENIED, 1<<62),
			}})
			return err
		},
		cb.ConversationService_ListConsent_FullMethodName: func(ctx context.Context, c *grpc.ClientConn, o string) error {
			_, err := cb.NewConversationServiceClient(c).ListConsent(ctx, &cb.ListConsentRequest{Owner: o})
			return err
		},
		cb.ConversationService_ActivateGroup_FullMethodName: func(ctx context.Context, c *grpc.ClientConn, o string) error {
			_, err := cb.NewConversationServiceClient(c).ActivateGroup(ctx, &cb.ActivateGroupRequest{Owner: o, GroupId: group})
			return err
		},
		cb.ArchiveService_Export_FullMethodName: func(ctx context.Context, c *grpc.ClientConn, o string) error {
			stream, err := cb.NewArchiveServiceClient(c).Export(ctx, &cb.ExportRequest{Owner: o, Key: archiveKey})
			if err != nil {
				return err
			}
			for {
				m, err := stream.Recv()
				if err != nil {
					return err
				}
				if m.GetSummary() != nil {
					return nil
				}
			}
		},
		cb.ArchiveService_EstimateExport_FullMethodName: func(ctx context.Context, c *grpc.ClientConn, o string) error {
			_, err := cb.NewArchiveServiceClient(c).EstimateExport(ctx, &cb.EstimateExportRequest{Owner: o})
			return err
		},
		cb.ArchiveService_Lint_FullMethodName: func(ctx context.Context, c *grpc.ClientConn, o string) error {
			stream, err := cb.NewArchiveServiceClient(c).Lint(ctx, &cb.LintRequest{Owner: o})
			if err != nil {
				return err
			}
			for {
				m, err := stream.Recv()
				if err != nil {
					return err
				}
				if m.GetSummary() != nil {
					return nil
				}
			}
		},
		cb.ArchiveService_Import_FullMethodName: func(ctx context.Context, c *grpc.ClientConn, o string) error {
			_, err := importArchive(t, cb.NewArchiveServiceClient(c), o, archiveKey, forgedArchive(t), 4096)
			return err
		},
		cb.BackupService_StartExport_FullMethodName: func(ctx context.Context, c *grpc.ClientConn, o string) error {
			_, err := cb.NewBackupServiceClient(c).StartExport(ctx, &cb.StartExportRequest{Owner: o, Label: "cross"})
			return err
		},
		cb.BackupService_StartImport_FullMethodName: func(ctx context.Context, c *grpc.ClientConn, o string) error {
			_, err := cb.NewBackupServiceClient(c).StartImport(ctx, &cb.StartImportRequest{Owner: o, Backup: jobs.NewID(time.Now())})
			return err
		},
		cb.BackupService_ListBackups_FullMethodName: func(ctx context.Context, c *grpc.ClientConn, o string) error {
			_, err := cb.NewBackupServiceClient(c).ListBackups(ctx, &cb.ListBackupsRequest{Owner: o})
			return err
		},
		cb.BackupService_GetBackup_FullMethodName: func(ctx context.Context, c *grpc.ClientConn, o string) error {
			_, err := cb.NewBackupServiceClient(c).GetBackup(ctx, &cb.GetBackupRequest{Owner: o, Backup: jobs.NewID(time.Now())})
			return err
		},
		cb.BackupService_DeleteBackup_FullMethodName: func(ctx context.Context, c *grpc.ClientConn, o string) error {
			_, err := cb.NewBackupServiceClient(c).DeleteBackup(ctx, &cb.DeleteBackupRequest{Owner: o, Backup: jobs.NewID(time.Now())})
			return err
		},
		cb.BackupService_GetBackupKey_FullMethodName: func(ctx context.Context, c *grpc.ClientConn, o string) error {
			_, err := cb.NewBackupServiceClient(c).GetBackupKey(ctx, &cb.GetBackupKeyRequest{Owner: o, Backup: jobs.NewID(time.Now())})
			return err
		},
		cb.BackupService_VerifyBackup_FullMethodName: func(ctx context.Context, c *grpc.ClientConn, o string) error {
			_, err := cb.NewBackupServiceClient(c).VerifyBackup(ctx, &cb.VerifyBackupRequest{Owner: o, Backup: jobs.NewID(time.Now())})
			return err
		},
		cb.BackupService_PlanRetention_FullMethodName: func(ctx context.Context, c *grpc.ClientConn, o string) error {
			_, err := cb.NewBackupServiceClient(c).PlanRetention(ctx, &cb.PlanRetentionRequest{Owner: o, Rules: &cb.RetentionRules{Last: 1}})
			return err
		},
		// A dry run: the row is called for the principal's own owner too.
		cb.BackupService_EraseOwner_FullMethodName: func(ctx context.Context, c *grpc.ClientConn, o string) error {
			_, err := cb.NewBackupServiceClient(c).EraseOwner(ctx, &cb.EraseOwnerRequest{Owner: o, DryRun: true})
			return err
		},
		cb.BackupService_GetOwnerErasure_FullMethodName: func(ctx context.Context, c *grpc.ClientConn, o string) error {
			_, err := cb.NewBackupServiceClient(c).GetOwnerErasure(ctx, &cb.GetOwnerErasureRequest{Owner: o})
			return err
		},
		cb.BackupService_ReenableOwner_FullMethodName: func(ctx context.Context, c *grpc.ClientConn, o string) error {
			_, err := cb.NewBackupServiceClient(c).ReenableOwner(ctx, &cb.ReenableOwnerRequest{Owner: o, Reason: "cross"})
			return err
		},
		cb.BackupService_SetLegalHold_FullMethodName: func(ctx context.Context, c *grpc.ClientConn, o string) error {
			_, err := cb.NewBackupServiceClient(c).SetLegalHold(ctx, &cb.SetLegalHoldRequest{Owner: o, Reason: "cross", EndTime: timestamppb.New(time.Now().Add(time.Second))})
			return err
		},
		cb.BackupService_ReleaseLegalHold_FullMethodName: func(ctx context.Context, c *grpc.ClientConn, o string) error {
			_, err := cb.NewBackupServiceClient(c).ReleaseLegalHold(ctx, &cb.ReleaseLegalHoldRequest{Owner: o})
			return err
		},
		cb.BackupService_ListLegalHolds_FullMethodName: func(ctx context.Context, c *grpc.ClientConn, o string) error {
			_, err := cb.NewBackupServiceClient(c).ListLegalHolds(ctx, &cb.ListLegalHoldsRequest{Owner: o})
			return err
		},
	}
}

// forgedArchive is an archive of one group with one message from a
// spoofed sender, written under archiveKey by a server of its own.
func forgedArchive(t *testing.T) []byte {
	t.Helper()
	conn := startTCP(t, Config{Store: enginetest.SQLite(t)})
	conv := cb.NewConversationServiceClient(conn)
	put(t, conv, "mallory", storetest.FullGroup("group-1"))
	m := storetest.Message("forged-import", storetest.GroupID("group-1"), 7)
	m.SenderInboxId = "bob"
	appendMsgs(t, conv, "mallory", m)
	data, _ := exportArchive(t, cb.NewArchiveServiceClient(conn), "mallory", nil)
	return data
}

// TestPerimeterEveryOwnerRPCHasARow derives, from the registered services'
// descriptors, every RPC whose request names an owner, and fails when
// ownerCalls lacks one: a new RPC cannot escape the cross-owner test.
func TestPerimeterEveryOwnerRPCHasARow(t *testing.T) {
	jobsCfg, _ := testJobs(t)
	srv := New(withJobs(Config{Store: enginetest.SQLite(t), Auth: adminPolicy(t)}, jobsCfg), zap.NewNop())
	calls := ownerCalls(t)
	found := 0
	for _, method := range ownerNamingMethods(t, srv.GRPC()) {
		found++
		if _, ok := calls[method]; !ok {
			t.Errorf("%s names an owner but has no row in ownerCalls", method)
		}
	}
	if found != len(calls) {
		t.Errorf("%d RPCs name an owner; ownerCalls has %d rows", found, len(calls))
	}
}

// TestPerimeterCrossOwner: a principal scoped to alice, naming bob (who
// exists) or nobody (who does not), is refused by every RPC that takes an
// owner with PERMISSION_DENIED and the same message, and bob's data is
// unchanged.
func TestPerimeterCrossOwner(t *testing.T) {
	forEachPerimeter(t, func(t *testing.T, p *perimeter) {
		ctx := t.Context()
		populate(t, cb.NewConversationServiceClient(p.as(t, opsToken)), "bob")
		before := snapshotOf(t, p, "bob")
		alice := p.as(t, aliceToken)
		aliceJWT := p.as(t, p.idp.valid(t, "alice", "conversations.read conversations.write archive.export archive.import"))
		for method, call := range ownerCalls(t) {
			for who, conn := range map[string]*grpc.ClientConn{"policy token": alice, "jwt": aliceJWT} {
				errBob := call(ctx, conn, "bob")
				errNobody := call(ctx, conn, "nobody")
				wantStatus(t, method+" as "+who+" for bob", errBob, codes.PermissionDenied)
				wantStatus(t, method+" as "+who+" for nobody", errNobody, codes.PermissionDenied)
				if status.Convert(errBob).Message() != status.Convert(errNobody).Message() {
					t.Errorf("%s: the refusal tells owners apart: %q vs %q", method, status.Convert(errBob).Message(), status.Convert(errNobody).Message())
				}
			}
			// The same call for alice herself is admitted (it may still
			// fail on its own terms, but never as a refusal).
			if code := status.Code(call(ctx, alice, "alice")); code == codes.PermissionDenied || code == codes.Unauthenticated {
				t.Errorf("%s for alice's own data: %v", method, code)
			}
		}
		if after := snapshotOf(t, p, "bob"); after != before {
			t.Errorf("cross-owner calls changed bob's data:\nbefore %s\nafter  %s", before, after)
		}
	})
}

// TestPerimeterScopes: the export-only principal cannot import, read or
// write; alice's token cannot call with a scope it lacks.
func TestPerimeterScopes(t *testing.T) {
	forEachPerimeter(t, func(t *testing.T, p *perimeter) {
		ctx := t.Context()
		populate(t, cb.NewConversationServiceClient(p.as(t, opsToken)), "alice")
		before := snapshotOf(t, p, "alice")
		exporter := p.as(t, exporterToken)
		data, _ := exportArchive(t, cb.NewArchiveServiceClient(exporter), "alice", nil)
		if len(data) == 0 {
			t.Fatal("the exporter exported nothing")
		}
		_, err := importArchive(t, cb.NewArchiveServiceClient(exporter), "alice", archiveKey, forgedArchive(t), 4096)
		wantStatus(t, "Import as the export-only principal", err, codes.PermissionDenied)
		_, err = cb.NewConversationServiceClient(exporter).ListGroups(ctx, &cb.ListGroupsRequest{Owner: "alice"})
		wantStatus(t, "ListGroups as the export-only principal", err, codes.PermissionDenied)
		_, err = cb.NewConversationServiceClient(exporter).PutGroup(ctx, &cb.PutGroupRequest{Owner: "alice", Group: storetest.FullGroup("x")})
		wantStatus(t, "PutGroup as the export-only principal", err, codes.PermissionDenied)
		_, err = cb.NewContentServiceClient(exporter).Decode(ctx, &cb.DecodeRequest{EncodedContent: textEnvelope(t, "x")})
		wantStatus(t, "Decode as the export-only principal", err, codes.PermissionDenied)
		if after := snapshotOf(t, p, "alice"); after != before {
			t.Errorf("refused calls changed alice's data")
		}
	})
}

// TestPerimeterTrustedActors: a principal bound to alice appends only
// messages alice sent and deletes only as alice; the relay, holding
// conversations.write.any_sender, does both for anyone.
func TestPerimeterTrustedActors(t *testing.T) {
	forEachPerimeter(t, func(t *testing.T, p *perimeter) {
		ctx := t.Context()
		ops := cb.NewConversationServiceClient(p.as(t, opsToken))
		g := storetest.FullGroup("g")
		put(t, ops, "alice", g)
		fromBob := storetest.Message("from-bob", g.Id, 1)
		fromBob.SenderInboxId = "bob"
		fromBob.DecryptedMessageBytes = textEnvelope(t, "hello from bob")
		appendMsgs(t, ops, "alice", fromBob)
		before := snapshotOf(t, p, "alice")

		alice := cb.NewConversationServiceClient(p.as(t, aliceToken))
		_, err := alice.DeleteMessage(ctx, &cb.DeleteMessageRequest{Owner: "alice", GroupId: g.Id, MessageId: fromBob.Id, ActorInboxId: "bob"})
		wantStatus(t, "alice deleting as bob", err, codes.PermissionDenied)
		spoofed := storetest.Message("spoofed", g.Id, 2)
		spoofed.SenderInboxId = "bob"
		own := storetest.Message("own", g.Id, 3)
		own.SenderInboxId = "alice"
		_, err = alice.AppendMessages(ctx, &cb.AppendMessagesRequest{Owner: "alice", Messages: []*mb.GroupMessageSave{own, spoofed}})
		wantStatus(t, "alice appending a message as bob", err, codes.PermissionDenied)
		if !strings.Contains(status.Convert(err).Message(), "messages[1].sender_inbox_id") {
			t.Errorf("the refusal does not name the field: %v", err)
		}
		if after := snapshotOf(t, p, "alice"); after != before {
			t.Errorf("refused actor calls changed alice's data")
		}
		// Her own inbox she may act as.
		appendMsgs(t, alice, "alice", own)

		if !p.mtls {
			return
		}
		relay := cb.NewConversationServiceClient(p.dial(t, transport.ClientOptions{CertFile: p.pki.relayCert, KeyFile: p.pki.relayKey}))
		appendMsgs(t, relay, "alice", spoofed)
		if _, err := relay.DeleteMessage(ctx, &cb.DeleteMessageRequest{Owner: "alice", GroupId: g.Id, MessageId: fromBob.Id, ActorInboxId: "bob"}); err != nil {
			t.Errorf("the relay deleting as bob: %v", err)
		}
	})
}

// TestPerimeterClientCertificates: a verified certificate the policy names
// proves its principal (by subject or by SAN); one it does not name, and
// one from another CA, prove nobody.
func TestPerimeterClientCertificates(t *testing.T) {
	for _, e := range enginetest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			p := startPerimeter(t, e.Open(t), true, nil)
			ctx := t.Context()
			populate(t, cb.NewConversationServiceClient(p.as(t, opsToken)), "bob")
			before := snapshotOf(t, p, "bob")
			bob := cb.NewConversationServiceClient(p.dial(t, transport.ClientOptions{CertFile: p.pki.bobCert, KeyFile: p.pki.bobKey}))
			if _, err := bob.ListGroups(ctx, &cb.ListGroupsRequest{Owner: "bob"}); err != nil {
				t.Errorf("bob by URI SAN: %v", err)
			}
			_, err := bob.ListGroups(ctx, &cb.ListGroupsRequest{Owner: "alice"})
			wantStatus(t, "bob's certificate naming alice", err, codes.PermissionDenied)

			nobody := cb.NewConversationServiceClient(p.dial(t, transport.ClientOptions{CertFile: p.pki.nobodyCert, KeyFile: p.pki.nobodyKey}))
			_, err = nobody.PutGroup(ctx, &cb.PutGroupRequest{Owner: "bob", Group: storetest.FullGroup("forged")})
			wantStatus(t, "a certificate in no policy", err, codes.Unauthenticated)

			rogue := cb.NewConversationServiceClient(p.dial(t, transport.ClientOptions{CertFile: p.pki.rogueCert, KeyFile: p.pki.rogueKey}))
			_, err = rogue.PutGroup(ctx, &cb.PutGroupRequest{Owner: "bob", Group: storetest.FullGroup("forged")})
			if err == nil || status.Code(err) == codes.OK {
				t.Error("a certificate from another CA was accepted")
			}
			if after := snapshotOf(t, p, "bob"); after != before {
				t.Errorf("refused certificate calls changed bob's data")
			}
		})
	}
}

// TestPerimeterCertificateRotation: a certificate replaced on disk is
// served to the next connection, with no restart.
func TestPerimeterCertificateRotation(t *testing.T) {
	p := startPerimeter(t, enginetest.SQLite(t), false, nil)
	served := func() *x509.Certificate {
		t.Helper()
		cfg, err := transport.ClientTLS(transport.ClientOptions{CAFile: p.pki.caFile, ServerName: "localhost"})
		if err != nil {
			t.Fatal(err)
		}
		cfg.NextProtos = []string{"h2"}
		conn, err := tls.Dial("tcp", p.addr, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0]
	}
	first := served()
	cert, key, err := p.pki.ca.Issue(devpki.Leaf{CommonName: "server-2", DNSNames: []string{"localhost"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.pki.serverKey, key, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.pki.serverCert, cert, 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := served()
		if got.Subject.CommonName == "server-2" {
			break
		}
		if got.SerialNumber.Cmp(first.SerialNumber) != 0 || time.Now().After(deadline) {
			t.Fatalf("served %s after the rotation; want server-2", got.Subject.CommonName)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// And gRPC over it works.
	if _, err := cb.NewContentServiceClient(p.as(t, opsToken)).Decode(t.Context(), &cb.DecodeRequest{EncodedContent: textEnvelope(t, "x")}); err != nil {
		t.Errorf("a call after the rotation: %v", err)
	}
}

// TestPerimeterPageTokens: a page token works only for the owner and the
// request it was issued for, and cannot be altered.
func TestPerimeterPageTokens(t *testing.T) {
	p := startPerimeter(t, enginetest.SQLite(t), false, nil)
	ctx := t.Context()
	ops := cb.NewConversationServiceClient(p.as(t, opsToken))
	for _, owner := range []string{"alice", "bob"} {
		g := storetest.FullGroup("g")
		put(t, ops, owner, g)
		appendMsgs(t, ops, owner, storetest.Messages(owner, g.Id, 5, 1)...)
		put(t, ops, owner, storetest.FullGroup("h"))
	}
	page, err := ops.ListMessages(ctx, &cb.ListMessagesRequest{Owner: "alice", GroupId: storetest.GroupID("g"), PageSize: 2})
	if err != nil || page.GetNextPageToken() == "" {
		t.Fatalf("first page: %v %v", page, err)
	}
	token := page.GetNextPageToken()
	if _, err := ops.ListMessages(ctx, &cb.ListMessagesRequest{Owner: "alice", GroupId: storetest.GroupID("g"), PageSize: 2, PageToken: token}); err != nil {
		t.Errorf("the token on its own request: %v", err)
	}
	tampered := []byte(token)
	tampered[3] ^= 1
	start := int64(2)
	for name, req := range map[string]*cb.ListMessagesRequest{
		"another owner":   {Owner: "bob", GroupId: storetest.GroupID("g"), PageToken: token},
		"another group":   {Owner: "alice", GroupId: storetest.GroupID("h"), PageToken: token},
		"another window":  {Owner: "alice", GroupId: storetest.GroupID("g"), StartNs: &start, PageToken: token},
		"an altered byte": {Owner: "alice", GroupId: storetest.GroupID("g"), PageToken: string(tampered)},
		"8 MiB":           {Owner: "alice", GroupId: storetest.GroupID("g"), PageToken: strings.Repeat("A", 8<<20)},
	} {
		_, err := ops.ListMessages(ctx, req)
		wantStatus(t, name, err, codes.InvalidArgument)
		if len(status.Convert(err).Message()) > 256 {
			t.Errorf("%s: a %d-byte error message", name, len(status.Convert(err).Message()))
		}
	}
	groups, err := ops.ListGroups(ctx, &cb.ListGroupsRequest{Owner: "alice", PageSize: 1})
	if err != nil || groups.GetNextPageToken() == "" {
		t.Fatalf("groups: %v %v", groups, err)
	}
	_, err = ops.ListGroups(ctx, &cb.ListGroupsRequest{Owner: "bob", PageToken: groups.GetNextPageToken()})
	wantStatus(t, "a groups token on another owner", err, codes.InvalidArgument)
	_, err = ops.ListConsent(ctx, &cb.ListConsentRequest{Owner: "alice", PageToken: groups.GetNextPageToken()})
	wantStatus(t, "a groups token on consent", err, codes.InvalidArgument)
	// A token is the principal's it was issued to: alice may read her
	// groups, but not continue a list the operator started.
	alice := cb.NewConversationServiceClient(p.as(t, aliceToken))
	_, err = alice.ListGroups(ctx, &cb.ListGroupsRequest{Owner: "alice", PageSize: 1, PageToken: groups.GetNextPageToken()})
	wantStatus(t, "another principal's token on its own request", err, codes.InvalidArgument)
	mine, err := alice.ListGroups(ctx, &cb.ListGroupsRequest{Owner: "alice", PageSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.ListGroups(ctx, &cb.ListGroupsRequest{Owner: "alice", PageSize: 1, PageToken: mine.GetNextPageToken()}); err != nil {
		t.Errorf("alice's own token: %v", err)
	}
}

// TestPerimeterLogsHoldNoSecrets: the server's logs, at debug level, over
// an authenticated export and import, name the principal and hold neither
// the archive key, the token, nor content bytes.
func TestPerimeterLogsHoldNoSecrets(t *testing.T) {
	var buf syncBuffer
	log := zap.New(zapJSONCore(&buf))
	p := startPerimeter(t, enginetest.SQLite(t), false, log)
	conn := p.as(t, aliceToken)
	conv := cb.NewConversationServiceClient(conn)
	put(t, conv, "alice", storetest.FullGroup("g"))
	secretText := "secret-content-7f3a9c"
	m := storetest.Message("m", storetest.GroupID("g"), 1)
	m.SenderInboxId = "alice"
	m.DecryptedMessageBytes = textEnvelope(t, secretText)
	appendMsgs(t, conv, "alice", m)
	data, _ := exportArchive(t, cb.NewArchiveServiceClient(conn), "alice", nil)
	if _, err := importArchive(t, cb.NewArchiveServiceClient(conn), "alice", archiveKey, data, 1024); err != nil {
		t.Fatal(err)
	}
	// And a refused import with a wrong key, whose error path logs too.
	_, _ = importArchive(t, cb.NewArchiveServiceClient(conn), "alice", bytes.Repeat([]byte{7}, 32), data, 1024)

	logs := buf.String()
	if !strings.Contains(logs, `"principal":"alice"`) {
		t.Errorf("request log lines do not name the principal:\n%s", logs)
	}
	for name, secret := range map[string]string{
		"token":           aliceToken,
		"token digest":    auth.TokenDigest(aliceToken),
		"content":         secretText,
		"key (raw)":       string(archiveKey),
		"key (hex)":       "4242424242424242",
		"key (base64)":    "QkJCQkJC",
		"wrong key (b64)": "BwcHBwcH",
		"archive bytes":   string(data[14:40]),
	} {
		if strings.Contains(logs, secret) {
			t.Errorf("the logs hold the %s", name)
		}
	}
}

// ownerNamingMethods lists every method of g whose request message names
// an owner, read from the descriptors the way the authorizer reads them.
func ownerNamingMethods(t *testing.T, g *grpc.Server) []string {
	t.Helper()
	var out []string
	for svc := range g.GetServiceInfo() {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
		if err != nil {
			continue // health and reflection: not ours
		}
		sd, ok := d.(protoreflect.ServiceDescriptor)
		if !ok {
			continue
		}
		for i := range sd.Methods().Len() {
			m := sd.Methods().Get(i)
			if namesOwner(m.Input()) {
				out = append(out, "/"+svc+"/"+string(m.Name()))
			}
		}
	}
	return out
}

// namesOwner: a string field "owner" at the top or in a message field.
func namesOwner(md protoreflect.MessageDescriptor) bool {
	if f := md.Fields().ByName("owner"); f != nil && f.Kind() == protoreflect.StringKind {
		return true
	}
	for i := range md.Fields().Len() {
		f := md.Fields().Get(i)
		if f.Kind() == protoreflect.MessageKind && !f.IsList() && !f.IsMap() {
			if o := f.Message().Fields().ByName("owner"); o != nil && o.Kind() == protoreflect.StringKind {
				return true
			}
		}
	}
	return false
}

// TestEveryMethodHasAScope: every registered method of ours has a scope
// rule, and every rule names a registered method.
func TestEveryMethodHasAScope(t *testing.T) {
	jobsCfg, _ := testJobs(t)
	srv := New(withJobs(Config{Store: enginetest.SQLite(t), Auth: adminPolicy(t)}, jobsCfg), zap.NewNop())
	n := 0
	for svc, info := range srv.GRPC().GetServiceInfo() {
		if svc == authz.HealthService || strings.HasPrefix(svc, "grpc.reflection.") {
			continue
		}
		for _, m := range info.Methods {
			n++
			if _, ok := authz.MethodScopes["/"+svc+"/"+m.Name]; !ok {
				t.Errorf("/%s/%s has no scope rule", svc, m.Name)
			}
		}
	}
	if n != len(authz.MethodScopes) {
		t.Errorf("%d methods registered; %d scope rules", n, len(authz.MethodScopes))
	}
}

// syncBuffer collects log output from concurrent handlers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) Sync() error { return nil }

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func zapJSONCore(w zapcore.WriteSyncer) zapcore.Core {
	return zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), w, zapcore.DebugLevel)
}

// TestSetConsentRefusesFarFuture: a consent record dated years ahead would
// win every later merge; SetConsent refuses it and keeps the stored state.
func TestSetConsentRefusesFarFuture(t *testing.T) {
	forEachEngine(t, func(t *testing.T, c cb.ConversationServiceClient, _ store.Store) {
		now := time.Now().UnixNano()
		ok := storetest.Consent("inbox-x", cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED, now)
		if _, err := c.SetConsent(t.Context(), &cb.SetConsentRequest{Owner: "alice", Records: []*cs.ConsentSave{ok}}); err != nil {
			t.Fatal(err)
		}
		pinned := storetest.Consent("inbox-x", cs.ConsentStateSave_CONSENT_STATE_SAVE_DENIED, now+int64(48*time.Hour))
		_, err := c.SetConsent(t.Context(), &cb.SetConsentRequest{Owner: "alice", Records: []*cs.ConsentSave{pinned}})
		wantCode(t, err, codes.InvalidArgument, "records[0].consented_at_ns")
		got, err := c.ListConsent(t.Context(), &cb.ListConsentRequest{Owner: "alice"})
		if err != nil || len(got.GetRecords()) != 1 || got.GetRecords()[0].GetState() != cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED {
			t.Errorf("consent after the refused write: %v %v", got, err)
		}
	})
}
