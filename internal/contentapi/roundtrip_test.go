package contentapi

import (
	"testing"

	"google.golang.org/protobuf/proto"

	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	"github.com/contentbackup/contentbackup/internal/codec"
)

// TestCTYPE007_RoundTripThroughContent goes through the Content message as
// the service does, nested replies included.
func TestCTYPE007_RoundTripThroughContent(t *testing.T) {
	reg := codec.NewRegistry()
	for _, c := range contents() {
		ec, err := Encode(reg, c)
		if err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		if got := outcomeOf(reg, mustMarshal(t, ec)).GetContent(); !proto.Equal(got, c) {
			t.Errorf("got  %v\nwant %v", got, c)
		}
	}
}

func TestTranscriptsDecode(t *testing.T) {
	reg := codec.NewRegistry()
	gmc := &mc.GroupMembershipChanges{MembersAdded: []*mc.MembershipChange{{InstallationIds: [][]byte{{1}}, AccountAddress: "0xa", InitiatedByAccountAddress: "0xb"}}}
	b := mustMarshal(t, &mc.EncodedContent{Type: codec.TypeGroupMembershipChange.Proto(), Content: mustMarshal(t, gmc)})
	if got := outcomeOf(reg, b).GetContent().GetGroupMembershipChange(); !proto.Equal(got, gmc) {
		t.Errorf("membership change: %v", got)
	}
}
