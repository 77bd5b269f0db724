package codec

import (
	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	ct "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents/content_types"
)

// TypeLegacyReaction is this type's identifier, spelled as the reference client spells it.
var TypeLegacyReaction = TypeID{"xmtp.org", "reaction", 1, 0}

// LegacyReactionCodec decodes the deprecated xmtp.org/reaction:1.0 JSON
// reaction, which historical stores are full of. It is outside the
// catalogue and never published (CTYPE-022).
type LegacyReactionCodec struct{}

func (LegacyReactionCodec) ContentType() TypeID { return TypeLegacyReaction }
func (LegacyReactionCodec) ShouldPush() bool    { return false }

func (LegacyReactionCodec) Encode(any) (*mc.EncodedContent, error) {
	return nil, encodeError("", "decode only: new reactions are published as xmtp.org/reaction:2.0 (CTYPE-022)")
}

var legacyActions = map[string]ct.ReactionAction{
	"added":   ct.ReactionAction_REACTION_ACTION_ADDED,
	"removed": ct.ReactionAction_REACTION_ACTION_REMOVED,
}

var legacySchemas = map[string]ct.ReactionSchema{
	"unicode":   ct.ReactionSchema_REACTION_SCHEMA_UNICODE,
	"shortcode": ct.ReactionSchema_REACTION_SCHEMA_SHORTCODE,
	"custom":    ct.ReactionSchema_REACTION_SCHEMA_CUSTOM,
}

func (LegacyReactionCodec) Decode(ec *mc.EncodedContent, _ NestedDecoder) (any, error) {
	return decodeLegacyReaction(ec.GetContent())
}

func decodeLegacyReaction(b []byte) (*ct.ReactionV2, error) {
	o, err := parseJSONObject(b, "")
	if err != nil {
		return nil, err
	}
	r := new(ct.ReactionV2)
	if r.Reference, err = o.requiredString("reference"); err != nil {
		return nil, err
	}
	if r.Content, err = o.requiredString("content"); err != nil {
		return nil, err
	}
	inbox, err := o.optionalString("referenceInboxId")
	if err != nil {
		return nil, err
	}
	if inbox != nil {
		r.ReferenceInboxId = *inbox
	}
	action, err := o.requiredString("action")
	if err != nil {
		return nil, err
	}
	var ok bool
	if r.Action, ok = legacyActions[action]; !ok {
		return nil, decodeError("action", "unknown action %q", Abbrev(action))
	}
	schema, err := o.requiredString("schema")
	if err != nil {
		return nil, err
	}
	if r.Schema, ok = legacySchemas[schema]; !ok {
		return nil, decodeError("schema", "unknown schema %q", Abbrev(schema))
	}
	return r, nil
}
