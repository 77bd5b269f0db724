package codec

import (
	"encoding/json"

	"google.golang.org/protobuf/types/known/structpb"

	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
)

// TypeIntent is this type's identifier, spelled as the reference client spells it.
var TypeIntent = TypeID{"coinbase.com", "intent", 1, 0}

// IntentCodec is coinbase.com/intent:1.0: JSON Intent (section 7.2).
type IntentCodec struct{}

func (IntentCodec) ContentType() TypeID { return TypeIntent }
func (IntentCodec) ShouldPush() bool    { return true }

// MaxIntentMetadataSize is the encode limit on the compact UTF-8 JSON of
// Intent.metadata.
const MaxIntentMetadataSize = 10240

type intentJSON struct {
	ID       string          `json:"id"`
	ActionID string          `json:"actionId"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

func (IntentCodec) Encode(v any) (*mc.EncodedContent, error) {
	in, ok := v.(*Intent)
	if !ok || in == nil {
		return nil, wrongValue("an *Intent", v)
	}
	if in.ID == "" {
		return nil, encodeError("intent.id", "required")
	}
	if in.ActionID == "" {
		return nil, encodeError("intent.action_id", "required")
	}
	out := intentJSON{ID: in.ID, ActionID: in.ActionID}
	if in.Metadata != nil {
		m, err := marshalJSON(in.Metadata.AsMap())
		if err != nil {
			return nil, encodeError("intent.metadata", "%v", err)
		}
		if len(m) > MaxIntentMetadataSize {
			return nil, encodeError("intent.metadata", "compact JSON is %d bytes, over the %d-byte limit", len(m), MaxIntentMetadataSize)
		}
		out.Metadata = m
	}
	b, err := marshalJSON(out)
	if err != nil {
		return nil, err
	}
	return envelope(TypeIntent, b, nil, ptr("User selected action: "+in.ActionID)), nil
}

func (IntentCodec) Decode(ec *mc.EncodedContent, _ NestedDecoder) (any, error) {
	return decodeIntent(ec.GetContent())
}

func decodeIntent(b []byte) (*Intent, error) {
	o, err := parseJSONObject(b, "")
	if err != nil {
		return nil, err
	}
	in := new(Intent)
	if in.ID, err = o.requiredString("id"); err != nil {
		return nil, err
	}
	if in.ActionID, err = o.requiredString("actionId", "action_id"); err != nil {
		return nil, err
	}
	raw, _, ok := o.lookup("metadata")
	if !ok {
		return in, nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, decodeError("metadata", "must be an object")
	}
	if in.Metadata, err = structpb.NewStruct(m); err != nil {
		return nil, decodeError("metadata", "%v", err)
	}
	return in, nil
}
