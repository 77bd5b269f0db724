package authz

import (
	"context"
	"testing"

	"google.golang.org/grpc/metadata"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
)

// TestOwnerOfMatchesDescriptors: the authorizer finds the owner in every
// request that names one, including Import's start message.
func TestOwnerOfMatchesDescriptors(t *testing.T) {
	for _, tc := range []struct {
		msg   any
		owner string
		named bool
	}{
		{&cb.ListGroupsRequest{Owner: "a"}, "a", true},
		{&cb.ImportRequest{Payload: &cb.ImportRequest_Start{Start: &cb.ImportStart{Owner: "b"}}}, "b", true},
		{&cb.ImportRequest{Payload: &cb.ImportRequest_Chunk{Chunk: []byte("0123456789abcdef")}}, "", false},
		{&cb.DecodeRequest{}, "", false},
		{&cb.VerifyRequest{}, "", false},
	} {
		owner, named := OwnerOf(tc.msg)
		if owner != tc.owner || named != tc.named {
			t.Errorf("OwnerOf(%T) = %q %v; want %q %v", tc.msg, owner, named, tc.owner, tc.named)
		}
	}
}

// TestServiceOf: a full method name's service, as the tap handle and the
// HTTP door read it.
func TestServiceOf(t *testing.T) {
	for in, want := range map[string]string{
		"/contentbackup.v1.ContentService/Decode": "contentbackup.v1.ContentService",
		"/grpc.health.v1.Health/Check":            HealthService,
		"/v1/owners/alice/groups":                 "v1/owners/alice",
		"":                                        "",
		"//Decode":                                "", // an empty service name stays empty
	} {
		if got := ServiceOf(in); got != want {
			t.Errorf("ServiceOf(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestPrincipalNameWithoutOne: a context no one was proven in names no
// principal (health, public reflection).
func TestPrincipalNameWithoutOne(t *testing.T) {
	if got := PrincipalName(metadata.NewIncomingContext(context.Background(), metadata.MD{})); got != "" {
		t.Errorf("PrincipalName = %q", got)
	}
}
