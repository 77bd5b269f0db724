package server

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/server/authz"
	"github.com/contentbackup/contentbackup/internal/transport"
)

// TestRefusalsCarryTheirDetails (issue 51): every refusal says its reason
// as google.rpc.ErrorInfo and its request id as google.rpc.RequestInfo,
// over gRPC and over Connect alike, and a page_size out of range is a
// BadRequest naming the field, so a client in any language tells them
// apart without reading prose.
func TestRefusalsCarryTheirDetails(t *testing.T) {
	grpcAddr, url := httpServer(t)
	ctx := t.Context()
	details := func(err error) (reason, requestID string, field string) {
		for _, d := range status.Convert(err).Details() {
			switch d := d.(type) {
			case *errdetails.ErrorInfo:
				if d.GetDomain() == authz.ErrorDomain {
					reason = d.GetReason()
				}
			case *errdetails.RequestInfo:
				requestID = d.GetRequestId()
			case *errdetails.BadRequest:
				field = d.GetFieldViolations()[0].GetField()
			}
		}
		return
	}
	anonymous := cb.NewConversationServiceClient(dial(t, grpcAddr, transport.ClientOptions{Insecure: true}))
	_, err := anonymous.ListGroups(ctx, &cb.ListGroupsRequest{Owner: "alice"})
	if reason, id, _ := details(err); reason != authz.ReasonUnauthenticated || id == "" {
		t.Errorf("gRPC, no credential: %v; reason %q, request id %q", err, reason, id)
	}
	alice := cb.NewConversationServiceClient(dial(t, grpcAddr, transport.ClientOptions{Insecure: true, Token: aliceToken}))
	_, err = alice.ListGroups(ctx, &cb.ListGroupsRequest{Owner: "bob"})
	if reason, id, _ := details(err); reason != authz.ReasonOwnerNotAllowed || id == "" {
		t.Errorf("gRPC, another owner: %v; reason %q, request id %q", err, reason, id)
	}
	_, err = alice.ListGroups(ctx, &cb.ListGroupsRequest{Owner: "alice", PageSize: 5000})
	if _, _, field := details(err); field != "page_size" {
		t.Errorf("gRPC, page_size 5000: %v; BadRequest field %q", err, field)
	}
	_, err = cb.NewBackupServiceClient(dial(t, grpcAddr, transport.ClientOptions{Insecure: true, Token: exporterToken})).EraseOwner(ctx, &cb.EraseOwnerRequest{Owner: "alice"})
	if reason, _, _ := details(err); reason != authz.ReasonScopeMissing {
		t.Errorf("gRPC, a scope the principal lacks: %v; reason %q", err, reason)
	}

	// Connect, no credential: the door's own refusal says the same.
	req, _ := http.NewRequest(http.MethodPost, url+cb.ConversationService_ListGroups_FullMethodName, strings.NewReader(`{"owner":"alice"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", "trace-42")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Code    string `json:"code"`
		Details []struct {
			Type  string `json:"type"`
			Value string `json:"value"`
		} `json:"details"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusUnauthorized || body.Code != "unauthenticated" {
		t.Fatalf("Connect, no credential: %d %+v %v", resp.StatusCode, body, err)
	}
	var reason, id string
	for _, d := range body.Details {
		raw, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(d.Value, "="))
		if err != nil {
			t.Fatalf("detail %s: %v", d.Type, err)
		}
		switch d.Type {
		case "google.rpc.ErrorInfo":
			var info errdetails.ErrorInfo
			if proto.Unmarshal(raw, &info) == nil {
				reason = info.GetReason()
			}
		case "google.rpc.RequestInfo":
			var info errdetails.RequestInfo
			if proto.Unmarshal(raw, &info) == nil {
				id = info.GetRequestId()
			}
		}
	}
	if reason != authz.ReasonUnauthenticated || id != "trace-42" || resp.Header.Get("X-Request-Id") != "trace-42" {
		t.Errorf("Connect, no credential: reason %q, request id %q, header %q; want UNAUTHENTICATED and the caller's trace-42", reason, id, resp.Header.Get("X-Request-Id"))
	}
}
