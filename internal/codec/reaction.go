package codec

import (
	"google.golang.org/protobuf/proto"

	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	ct "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents/content_types"
)

// TypeReaction is this type's identifier, spelled as the reference client spells it.
var TypeReaction = TypeID{"xmtp.org", "reaction", 2, 0}

// ReactionCodec is xmtp.org/reaction:2.0: a protobuf ReactionV2 (CTYPE-022).
type ReactionCodec struct{}

func (ReactionCodec) ContentType() TypeID { return TypeReaction }
func (ReactionCodec) ShouldPush() bool    { return false }

func (ReactionCodec) Encode(v any) (*mc.EncodedContent, error) {
	r, ok := v.(*ct.ReactionV2)
	if !ok || r == nil {
		return nil, wrongValue("a *ReactionV2", v)
	}
	if err := checkReaction(r); err != nil {
		return nil, err
	}
	b, err := deterministic.Marshal(r)
	if err != nil {
		return nil, encodeError("", "marshal: %v", err)
	}
	return envelope(TypeReaction, b, nil, ptr(reactionFallback(r))), nil
}

func (ReactionCodec) Decode(ec *mc.EncodedContent, _ NestedDecoder) (any, error) {
	r := new(ct.ReactionV2)
	if err := proto.Unmarshal(ec.GetContent(), r); err != nil {
		return nil, decodeError("content", "not a ReactionV2: %v", err)
	}
	return r, nil
}

func checkReaction(r *ct.ReactionV2) error {
	if r.GetReference() == "" {
		return encodeError("reaction.reference", "required")
	}
	if _, ok := ct.ReactionAction_name[int32(r.GetAction())]; !ok {
		return encodeError("reaction.action", "unknown value %d", int32(r.GetAction()))
	}
	if _, ok := ct.ReactionSchema_name[int32(r.GetSchema())]; !ok {
		return encodeError("reaction.schema", "unknown value %d", int32(r.GetSchema()))
	}
	return nil
}

// reactionFallback is the reference client's fallback text for reactions.
func reactionFallback(r *ct.ReactionV2) string {
	if r.GetAction() == ct.ReactionAction_REACTION_ACTION_REMOVED {
		return `Removed "` + r.GetContent() + `" from an earlier message`
	}
	return `Reacted with "` + r.GetContent() + `" to an earlier message`
}

// deterministic marshals protobuf content the same way every time, so
// encoding is reproducible (map fields in key order).
var deterministic = proto.MarshalOptions{Deterministic: true}
