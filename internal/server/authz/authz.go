// Package authz is the gRPC edge's first concern: who the caller is, and
// what it may do. It proves the caller on a new stream's headers (grpc-go's
// tap handle, before a byte of the request is read), checks the method's
// scope, and checks every request message's owner and actors before any
// handler runs; the HTTP/JSON listener's door proves its callers through
// it too (AdmitHTTP). A refusal is counted and logged with its reason,
// never echoing a credential or the owner the caller named.
package authz

import (
	"context"
	"crypto/x509"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"go.uber.org/zap"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/auth"
	"github.com/contentbackup/contentbackup/internal/fault"
	"github.com/contentbackup/contentbackup/internal/server/requestid"
)

// MethodScopes is what each RPC needs: any one of the scopes listed. A
// method missing here is refused to everyone (and TestEveryMethodHasAScope
// fails), so a new RPC is closed until someone decides who may call it.
var MethodScopes = map[string][]auth.Scope{
	cb.ContentService_Encode_FullMethodName:            {auth.ScopeContent},
	cb.ContentService_Decode_FullMethodName:            {auth.ScopeContent},
	cb.ContentService_DecodeBatch_FullMethodName:       {auth.ScopeContent},
	cb.ContentService_Preview_FullMethodName:           {auth.ScopeContent},
	cb.ContentService_EncryptAttachment_FullMethodName: {auth.ScopeContent},
	cb.ContentService_DecryptAttachment_FullMethodName: {auth.ScopeContent},

	cb.ConversationService_GetGroup_FullMethodName:       {auth.ScopeConversationsRead},
	cb.ConversationService_ListGroups_FullMethodName:     {auth.ScopeConversationsRead},
	cb.ConversationService_ListMessages_FullMethodName:   {auth.ScopeConversationsRead},
	cb.ConversationService_StreamMessages_FullMethodName: {auth.ScopeConversationsRead},
	cb.ConversationService_ListConsent_FullMethodName:    {auth.ScopeConversationsRead},
	cb.ConversationService_PutGroup_FullMethodName:       {auth.ScopeConversationsWrite},
	cb.ConversationService_AppendMessages_FullMethodName: {auth.ScopeConversationsWrite},
	cb.ConversationService_DeleteMessage_FullMethodName:  {auth.ScopeConversationsWrite},
	cb.ConversationService_SetConsent_FullMethodName:     {auth.ScopeConversationsWrite},
	cb.ConversationService_ActivateGroup_FullMethodName:  {auth.ScopeConversationsWrite},

	cb.ArchiveService_Export_FullMethodName: {auth.ScopeArchiveExport},
	cb.ArchiveService_Import_FullMethodName: {auth.ScopeArchiveImport},
	// Lint reads the owner's records as an export does.
	cb.ArchiveService_Lint_FullMethodName: {auth.ScopeArchiveExport},
	// An estimate reads the owner's records as an export does.
	cb.ArchiveService_EstimateExport_FullMethodName: {auth.ScopeArchiveExport},
	// Reading an archive's metadata or checking it touches no owner's
	// data: either side of a transfer may do it.
	cb.ArchiveService_ReadMetadata_FullMethodName: {auth.ScopeArchiveImport, auth.ScopeArchiveExport},
	cb.ArchiveService_Verify_FullMethodName:       {auth.ScopeArchiveImport, auth.ScopeArchiveExport},

	cb.BackupService_StartExport_FullMethodName: {auth.ScopeArchiveExport},
	cb.BackupService_StartImport_FullMethodName: {auth.ScopeArchiveImport},
	// A backup's key opens the owner's whole archive: the export side's.
	cb.BackupService_GetBackupKey_FullMethodName: {auth.ScopeArchiveExport},
	// Verifying reads the backup (as an export's owner may) and records
	// the result in the catalog.
	cb.BackupService_VerifyBackup_FullMethodName: {auth.ScopeArchiveExport},
	cb.BackupService_DeleteBackup_FullMethodName: {auth.ScopeArchiveExport},
	// A retention plan reads the catalog and the schedule that would
	// delete from it: the export side's.
	cb.BackupService_PlanRetention_FullMethodName: {auth.ScopeArchiveExport},
	// Erasure needs its own scope, which no other implies (admin
	// included); holds theirs, and the holds are read with either.
	cb.BackupService_EraseOwner_FullMethodName:       {auth.ScopeOwnersErase},
	cb.BackupService_GetOwnerErasure_FullMethodName:  {auth.ScopeOwnersErase},
	cb.BackupService_ReenableOwner_FullMethodName:    {auth.ScopeOwnersErase},
	cb.BackupService_SetLegalHold_FullMethodName:     {auth.ScopeOwnersHold},
	cb.BackupService_ReleaseLegalHold_FullMethodName: {auth.ScopeOwnersHold},
	cb.BackupService_ListLegalHolds_FullMethodName:   {auth.ScopeOwnersHold, auth.ScopeArchiveExport},
	// The key status names no owner and tells of the whole catalog.
	cb.BackupService_GetKeyStatus_FullMethodName: {auth.ScopeAdmin},
	// The catalog is read by either side of a transfer.
	cb.BackupService_ListBackups_FullMethodName: {auth.ScopeArchiveExport, auth.ScopeArchiveImport},
	cb.BackupService_GetBackup_FullMethodName:   {auth.ScopeArchiveExport, auth.ScopeArchiveImport},
	// Operations name no owner: either archive scope lets a principal in,
	// and each operation is then shown only to a principal holding its
	// kind's scope for its owner (OperationsService).
	longrunningpb.Operations_GetOperation_FullMethodName:    {auth.ScopeArchiveExport, auth.ScopeArchiveImport, auth.ScopeOwnersErase},
	longrunningpb.Operations_ListOperations_FullMethodName:  {auth.ScopeArchiveExport, auth.ScopeArchiveImport, auth.ScopeOwnersErase},
	longrunningpb.Operations_WaitOperation_FullMethodName:   {auth.ScopeArchiveExport, auth.ScopeArchiveImport, auth.ScopeOwnersErase},
	longrunningpb.Operations_CancelOperation_FullMethodName: {auth.ScopeArchiveExport, auth.ScopeArchiveImport, auth.ScopeOwnersErase},
	longrunningpb.Operations_DeleteOperation_FullMethodName: {auth.ScopeArchiveExport, auth.ScopeArchiveImport, auth.ScopeOwnersErase},
}

const (
	HealthService = "grpc.health.v1.Health"
	// Both reflection versions grpcurl may ask for.
	reflectionV1      = "grpc.reflection.v1.ServerReflection"
	reflectionV1Alpha = "grpc.reflection.v1alpha.ServerReflection"
)

// Authorizer is the first interceptor: it proves the caller's principal,
// checks the method's scope, and checks every request message's owner and
// actors, before any handler runs.
type Authorizer struct {
	authn *auth.Authenticator
	// publicReflection serves reflection to unauthenticated callers.
	publicReflection bool
	log              *zap.Logger
	denied           func(reason string)
	proved           func(where string)
	// malformed takes back a request the codec could not parse; every
	// message is checked against it before anything else reads it.
	malformed func(msg any) error
}

// Config is what an Authorizer works from.
type Config struct {
	// Authn proves callers; nil refuses every call but health.
	Authn *auth.Authenticator
	// PublicReflection serves reflection without credentials.
	PublicReflection bool
	Log              *zap.Logger
	// Denied, when set, counts each refusal by its reason.
	Denied func(reason string)
	// Proved, when set, counts each credential verified, by where: "tap"
	// (a gRPC call's headers), "http" (the HTTP/JSON door) or "call" (a
	// call the tap did not see). A call is proven once, wherever it came
	// in.
	Proved func(where string)
	// Malformed returns the parse error the codec recorded against a
	// request message, or nil (see the server's request codec).
	Malformed func(msg any) error
}

// New returns the authorizer of cfg.
func New(cfg Config) *Authorizer {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.Malformed == nil {
		cfg.Malformed = func(any) error { return nil }
	}
	if cfg.Proved == nil {
		cfg.Proved = func(string) {}
	}
	return &Authorizer{authn: cfg.Authn, publicReflection: cfg.PublicReflection, log: cfg.Log, denied: cfg.Denied, proved: cfg.Proved, malformed: cfg.Malformed}
}

// ServiceOf is the service of a full method name (or an RPC path).
func ServiceOf(fullMethod string) string {
	s := strings.TrimPrefix(fullMethod, "/")
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		return s[:i]
	}
	return s
}

// Tap is grpc-go's InTapHandle: it runs on a new stream's headers, before
// gRPC reads, decompresses or decodes a byte of the request, and refuses
// there a caller that is not proven or whose principal lacks the
// method's scope. An anonymous request therefore costs the server its
// headers, whatever its body declares or compresses (a 2 KB gzip
// request expanded to 185 MB before the interceptor refused it). The
// principal it proves rides in the stream's context, so the interceptor
// does not prove it again.
//
// A refusal here is a trailers-only answer, which carries no header of
// ours: its request id rides in the status as google.rpc.RequestInfo,
// the standard detail for it, and in the log line.
func (a *Authorizer) Tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	ctx = metadata.NewIncomingContext(ctx, info.Header)
	ctx, _ = requestid.With(ctx) // a refusal carries it (refusal)
	ctx, err := a.admit(context.WithValue(ctx, whereKey{}, "tap"), info.FullMethodName)
	if err != nil {
		return nil, err
	}
	return context.WithValue(ctx, tappedKey{}, true), nil
}

// ErrorDomain is the ErrorInfo domain of every reason the server gives.
const ErrorDomain = "contentbackup.v1"

// Refusal reasons, as ErrorInfo carries them: a client tells refusals
// apart by these, never by the message.
const (
	ReasonUnauthenticated = string(fault.ReasonUnauthenticated)
	ReasonScopeMissing    = string(fault.ReasonScopeMissing)
	ReasonOwnerNotAllowed = string(fault.ReasonOwnerNotPermitted)
	ReasonActorNotAllowed = string(fault.ReasonActorNotPermitted)
	ReasonMethodNotOpen   = string(fault.ReasonMethodNotOpen)
)

// refusal is a refusal's status: its code and message, its reason as
// google.rpc.ErrorInfo, and the call's request id as
// google.rpc.RequestInfo (a trailers-only answer carries no header of
// ours), on every refusal alike (issue 51: one carried a request id and
// no reason, another neither).
func refusal(ctx context.Context, code codes.Code, reason, msg string) error {
	st := status.New(code, msg)
	info := &errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}
	var d *status.Status
	var err error
	if id := requestid.FromContext(ctx); id != "" {
		d, err = st.WithDetails(info, &errdetails.RequestInfo{RequestId: id})
	} else {
		d, err = st.WithDetails(info)
	}
	if err != nil {
		return st.Err()
	}
	return d.Err()
}

// tappedKey marks a context whose caller the tap handle admitted.
type tappedKey struct{}

// admit returns ctx carrying the principal, or the status refusing the
// call. A call the tap handle admitted is not admitted again.
func (a *Authorizer) admit(ctx context.Context, fullMethod string) (context.Context, error) {
	if tapped, _ := ctx.Value(tappedKey{}).(bool); tapped {
		return ctx, nil
	}
	svc := ServiceOf(fullMethod)
	if svc == HealthService {
		return ctx, nil
	}
	reflection := svc == reflectionV1 || svc == reflectionV1Alpha
	if reflection && a.publicReflection {
		return ctx, nil
	}
	p, err := a.authenticate(ctx)
	if err != nil {
		a.refuse(ctx, fullMethod, "unauthenticated", err)
		return nil, refusal(ctx, codes.Unauthenticated, ReasonUnauthenticated, err.Error())
	}
	ctx = auth.WithPrincipal(ctx, p)
	if reflection {
		return ctx, nil // any proven principal may list the API
	}
	scopes, ok := MethodScopes[fullMethod]
	if !ok {
		a.log.Error("method has no scope rule; refused to everyone", zap.String("method", fullMethod))
		return nil, refusal(ctx, codes.PermissionDenied, ReasonMethodNotOpen, "this method is not open to any scope")
	}
	for _, s := range scopes {
		if p.Has(s) {
			return ctx, nil
		}
	}
	err = errors.New("principal " + p.Name + " lacks the scope " + string(scopes[0]) + " this method needs")
	a.refuse(ctx, fullMethod, "scope", err)
	return nil, refusal(ctx, codes.PermissionDenied, ReasonScopeMissing, err.Error())
}

// provenKey carries the principal the HTTP/JSON door proved (AdmitHTTP)
// in the request's context, which the transcoded gRPC call inherits; a
// client cannot set a context value.
type provenKey struct{}

// whereKey says where a call is being proven, for Proved.
type whereKey struct{}

func (a *Authorizer) authenticate(ctx context.Context) (*auth.Principal, error) {
	if p, ok := ctx.Value(provenKey{}).(*auth.Principal); ok {
		return p, nil // proven at the HTTP/JSON door
	}
	if a.authn == nil {
		return nil, errors.New("no authentication is configured")
	}
	md, _ := metadata.FromIncomingContext(ctx)
	values := md.Get("authorization")
	if len(values) > 1 {
		return nil, errors.New("credentials not valid: more than one authorization header")
	}
	header := ""
	if len(values) == 1 {
		header = values[0]
	}
	p, err := a.authn.Authenticate(ctx, header, verifiedLeaf(ctx))
	if err == nil {
		where, _ := ctx.Value(whereKey{}).(string)
		if where == "" {
			where = "call"
		}
		a.proved(where)
	}
	return p, err
}

// verifiedLeaf is the client certificate the TLS handshake verified
// against the client CA; an unverified certificate never counts.
func verifiedLeaf(ctx context.Context) *x509.Certificate {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return nil
	}
	return info.State.VerifiedChains[0][0]
}

func (a *Authorizer) refuse(ctx context.Context, method, reason string, err error) {
	if a.denied != nil {
		a.denied(reason)
	}
	fields := []zap.Field{zap.String("grpc.method", method), zap.String("reason", reason), zap.String("error", err.Error()), zap.String("request_id", requestid.FromContext(ctx))}
	if p, ok := peer.FromContext(ctx); ok {
		fields = append(fields, zap.String("peer.address", p.Addr.String()))
	}
	if pr := auth.FromContext(ctx); pr != nil {
		fields = append(fields, zap.String("principal", pr.Name))
	}
	a.log.Info("call refused", fields...)
}

// checkRequest enforces the owner scope and the trusted-actor rule on one
// request message. The refusal reads the same whether or not the owner
// exists, and never repeats the owner the caller sent.
func (a *Authorizer) checkRequest(ctx context.Context, method string, msg any) error {
	p := auth.FromContext(ctx)
	if p == nil {
		return nil // health and public reflection name no owner
	}
	owner, named := OwnerOf(msg)
	if !named || owner == "" {
		return nil // no owner, or an empty one the handler rejects as invalid
	}
	if !p.Owners.Contains(owner) {
		err := errors.New("principal " + p.Name + " may not act for this owner")
		a.refuse(ctx, method, "owner", err)
		return refusal(ctx, codes.PermissionDenied, ReasonOwnerNotAllowed, err.Error())
	}
	if err := checkActors(p, owner, msg); err != nil {
		a.refuse(ctx, method, "actor", err)
		return refusal(ctx, codes.PermissionDenied, ReasonActorNotAllowed, err.Error())
	}
	return nil
}

// checkActors applies the trusted-actor rule: a principal bound to listed
// owners names only the owner itself as a message's sender or a deletion's
// actor, unless it holds conversations.write.any_sender.
func checkActors(p *auth.Principal, owner string, msg any) error {
	const grant = " (conversations.write.any_sender grants any)"
	switch r := msg.(type) {
	case *cb.AppendMessagesRequest:
		for i, m := range r.GetMessages() {
			if !p.MayActAs(owner, m.GetSenderInboxId()) {
				return errors.New("messages[" + strconv.Itoa(i) + "].sender_inbox_id: principal " + p.Name + " may append only messages the owner sent" + grant)
			}
		}
	case *cb.DeleteMessageRequest:
		if !p.MayActAs(owner, r.GetActorInboxId()) {
			return errors.New("actor_inbox_id: principal " + p.Name + " may delete only as the owner" + grant)
		}
	case *cb.StartImportRequest:
		// The backup read is the source owner's: the principal must hold
		// it as well, and restoring it into another owner is a
		// migration, which needs its own scope.
		if src := r.GetSourceOwner(); src != "" && src != owner {
			if !p.Owners.Contains(src) {
				return errors.New("source_owner: principal " + p.Name + " may not act for this owner")
			}
			if !p.Has(auth.ScopeArchiveMigrate) {
				return errors.New("source_owner: restoring one owner's backup into another needs the scope " + string(auth.ScopeArchiveMigrate))
			}
		}
	}
	return nil
}

// OwnerOf finds the owner a request names: a top-level string field
// "owner", or one inside a message field that is set (Import's start). It
// reads the descriptor, so a new request type is covered without code.
func OwnerOf(msg any) (string, bool) {
	m, ok := msg.(proto.Message)
	if !ok {
		return "", false
	}
	r := m.ProtoReflect()
	if owner, ok := ownerField(r); ok {
		return owner, true
	}
	fields := r.Descriptor().Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		if f.Kind() != protoreflect.MessageKind || f.IsList() || f.IsMap() || !r.Has(f) {
			continue
		}
		if owner, ok := ownerField(r.Get(f).Message()); ok {
			return owner, true
		}
	}
	return "", false
}

func ownerField(r protoreflect.Message) (string, bool) {
	f := r.Descriptor().Fields().ByName("owner")
	if f == nil || f.Kind() != protoreflect.StringKind || f.IsList() {
		return "", false
	}
	return r.Get(f).String(), true
}

func (a *Authorizer) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	malformed := a.malformed(req) // taken first, so it is never left behind
	ctx, id := requestid.With(ctx)
	_ = grpc.SetHeader(ctx, metadata.Pairs(requestid.Header, id))
	ctx, err := a.admit(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	if malformed != nil {
		a.refuse(ctx, info.FullMethod, "malformed", malformed)
		return nil, malformed
	}
	if err := a.checkRequest(ctx, info.FullMethod, req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (a *Authorizer) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, id := requestid.With(ss.Context())
	_ = ss.SetHeader(metadata.Pairs(requestid.Header, id))
	ctx, err := a.admit(ctx, info.FullMethod)
	if err != nil {
		return err
	}
	return handler(srv, &authorizedStream{ServerStream: ss, ctx: ctx, a: a, method: info.FullMethod})
}

// authorizedStream checks every message the client sends before the
// handler sees it, so a stream names its owner under the same rule as a
// unary call.
type authorizedStream struct {
	grpc.ServerStream
	ctx    context.Context
	a      *Authorizer
	method string
}

func (s *authorizedStream) Context() context.Context { return s.ctx }

func (s *authorizedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if err := s.a.malformed(m); err != nil {
		s.a.refuse(s.ctx, s.method, "malformed", err)
		return err
	}
	return s.a.checkRequest(s.ctx, s.method, m)
}

// AdmitHTTP proves an HTTP request's caller as the gRPC listener proves
// one (the Authorization header, or the client certificate TLS
// verified), before the listener reads its body; health, and reflection
// where it is public, are open.
func (a *Authorizer) AdmitHTTP(r *http.Request) (*http.Request, string, error) {
	svc := ServiceOf(r.URL.Path)
	if svc == HealthService || a.publicReflection && (svc == reflectionV1 || svc == reflectionV1Alpha) {
		return r, "", nil
	}
	if a.authn == nil {
		return nil, "", errors.New("no authentication is configured")
	}
	values := r.Header.Values("Authorization")
	if len(values) > 1 {
		return nil, "", errors.New("credentials not valid: more than one authorization header")
	}
	header := ""
	if len(values) == 1 {
		header = values[0]
	}
	var leaf *x509.Certificate
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		leaf = r.TLS.VerifiedChains[0][0]
	}
	p, err := a.authn.Authenticate(r.Context(), header, leaf)
	if err != nil {
		a.refuse(r.Context(), r.URL.Path, "unauthenticated", err)
		return nil, "", err
	}
	a.proved("http")
	// The call behind the door checks this principal's scope and owners
	// as any call's, without verifying its credentials again (a JWT's
	// signature, a policy digest).
	return r.WithContext(context.WithValue(r.Context(), provenKey{}, p)), p.Name, nil
}

// PrincipalName is the proven principal's name in ctx, or "".
func PrincipalName(ctx context.Context) string {
	if p := auth.FromContext(ctx); p != nil {
		return p.Name
	}
	return ""
}
