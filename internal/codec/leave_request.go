package codec

import (
	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	ct "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents/content_types"
)

// TypeLeaveRequest is this type's identifier, spelled as the reference client spells it.
var TypeLeaveRequest = TypeID{"xmtp.org", "leave_request", 1, 0}

// LeaveRequestCodec is xmtp.org/leave_request:1.0: a protobuf LeaveRequest.
type LeaveRequestCodec struct{}

func (LeaveRequestCodec) ContentType() TypeID { return TypeLeaveRequest }
func (LeaveRequestCodec) ShouldPush() bool    { return false }

func (LeaveRequestCodec) Encode(v any) (*mc.EncodedContent, error) {
	return encodeProto[*ct.LeaveRequest](TypeLeaveRequest, v, "LeaveRequest")
}

func (LeaveRequestCodec) Decode(ec *mc.EncodedContent, _ NestedDecoder) (any, error) {
	return decodeProto(ec, new(ct.LeaveRequest), "LeaveRequest")
}
