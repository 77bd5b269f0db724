package codec

import (
	"math"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
)

// TypeActions is this type's identifier, spelled as the reference client spells it.
var TypeActions = TypeID{"coinbase.com", "actions", 1, 0}

// ActionsCodec is coinbase.com/actions:1.0: JSON Actions (section 7.2).
type ActionsCodec struct{}

func (ActionsCodec) ContentType() TypeID { return TypeActions }
func (ActionsCodec) ShouldPush() bool    { return true }

// MaxActions is the encode limit on Actions.actions.
const MaxActions = 10

type actionsJSON struct {
	ID          string       `json:"id"`
	Description string       `json:"description"`
	Actions     []actionJSON `json:"actions"`
	ExpiresAt   *string      `json:"expiresAt,omitempty"`
}

type actionJSON struct {
	ID        string  `json:"id"`
	Label     string  `json:"label"`
	ImageURL  *string `json:"imageUrl,omitempty"`
	Style     *string `json:"style,omitempty"`
	ExpiresAt *string `json:"expiresAt,omitempty"`
}

var styleNames = map[ActionStyle]string{
	ActionStylePrimary:   "primary",
	ActionStyleSecondary: "secondary",
	ActionStyleDanger:    "danger",
}

var styleValues = map[string]ActionStyle{
	"primary":   ActionStylePrimary,
	"secondary": ActionStyleSecondary,
	"danger":    ActionStyleDanger,
}

func (ActionsCodec) Encode(v any) (*mc.EncodedContent, error) {
	a, ok := v.(*Actions)
	if !ok || a == nil {
		return nil, wrongValue("an *Actions", v)
	}
	if a.ID == "" {
		return nil, encodeError("actions.id", "required")
	}
	if a.Description == "" {
		return nil, encodeError("actions.description", "required")
	}
	if n := len(a.Actions); n < 1 || n > MaxActions {
		return nil, encodeError("actions.actions", "must hold 1 through %d entries, got %d", MaxActions, n)
	}
	out := actionsJSON{ID: a.ID, Description: a.Description}
	var err error
	if out.ExpiresAt, err = encodeExpiry("actions.expires_at", a.ExpiresAt); err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(a.Actions))
	var fallback strings.Builder
	fallback.WriteString(a.Description + "\n\n")
	for i, act := range a.Actions {
		path := indexPath("actions.actions", i)
		if act.ID == "" {
			return nil, encodeError(path+".id", "required")
		}
		if act.Label == "" {
			return nil, encodeError(path+".label", "required")
		}
		if seen[act.ID] {
			return nil, encodeError(path+".id", "duplicate action id %q", Abbrev(act.ID))
		}
		seen[act.ID] = true
		aj := actionJSON{ID: act.ID, Label: act.Label, ImageURL: act.ImageURL}
		if act.Style != ActionStyleUnspecified {
			name, ok := styleNames[act.Style]
			if !ok {
				return nil, encodeError(path+".style", "unknown value %d", int32(act.Style))
			}
			aj.Style = &name
		}
		if aj.ExpiresAt, err = encodeExpiry(path+".expires_at", act.ExpiresAt); err != nil {
			return nil, err
		}
		out.Actions = append(out.Actions, aj)
		if i > 0 {
			fallback.WriteString("\n")
		}
		fallback.WriteString("[" + itoa(i+1) + "] " + act.Label)
	}
	fallback.WriteString("\n\nReply with the number to select")
	b, err := marshalJSON(out)
	if err != nil {
		return nil, err
	}
	return envelope(TypeActions, b, nil, ptr(fallback.String())), nil
}

// The signed 64-bit nanosecond range CTYPE-030 bounds expiry to.
var (
	minExpiry = time.Unix(0, math.MinInt64).UTC()
	maxExpiry = time.Unix(0, math.MaxInt64).UTC()
)

// encodeExpiry writes an RFC 3339 UTC timestamp with exactly three
// fractional digits, discarding precision below milliseconds; a time outside
// the signed 64-bit nanosecond range fails (CTYPE-030).
func encodeExpiry(field string, ts *timestamppb.Timestamp) (*string, error) {
	if ts == nil {
		return nil, nil
	}
	if err := ts.CheckValid(); err != nil {
		return nil, encodeError(field, "invalid timestamp: %v", err)
	}
	t := ts.AsTime().Truncate(time.Millisecond)
	if t.Before(minExpiry) || t.After(maxExpiry) {
		return nil, encodeError(field, "%s is outside the signed 64-bit nanosecond range (CTYPE-030)", t.Format(time.RFC3339Nano))
	}
	s := t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
	return &s, nil
}

func (ActionsCodec) Decode(ec *mc.EncodedContent, _ NestedDecoder) (any, error) {
	return decodeActions(ec.GetContent())
}

func decodeActions(b []byte) (*Actions, error) {
	o, err := parseJSONObject(b, "")
	if err != nil {
		return nil, err
	}
	a := new(Actions)
	if a.ID, err = o.requiredString("id"); err != nil {
		return nil, err
	}
	if a.Description, err = o.requiredString("description"); err != nil {
		return nil, err
	}
	if a.ExpiresAt, err = decodeExpiry(o); err != nil {
		return nil, err
	}
	list, err := o.requiredArray("actions")
	if err != nil {
		return nil, err
	}
	// No count or uniqueness limit on decode: historical content stays readable.
	for i, raw := range list {
		ao, err := parseJSONObject(raw, indexPath("actions", i))
		if err != nil {
			return nil, err
		}
		act := new(Action)
		if act.ID, err = ao.requiredString("id"); err != nil {
			return nil, err
		}
		if act.Label, err = ao.requiredString("label"); err != nil {
			return nil, err
		}
		if act.ImageURL, err = ao.optionalString("imageUrl", "image_url"); err != nil {
			return nil, err
		}
		style, err := ao.optionalString("style")
		if err != nil {
			return nil, err
		}
		if style != nil {
			var ok bool
			if act.Style, ok = styleValues[*style]; !ok {
				return nil, decodeError(ao.field("style"), "must be primary, secondary or danger, got %q", Abbrev(*style))
			}
		}
		if act.ExpiresAt, err = decodeExpiry(ao); err != nil {
			return nil, err
		}
		a.Actions = append(a.Actions, act)
	}
	return a, nil
}

// decodeExpiry parses expiresAt (or its alias expires_at) as RFC 3339 in
// any offset, normalized to UTC, and fails outside the signed 64-bit
// nanosecond range (CTYPE-030).
func decodeExpiry(o jsonObject) (*timestamppb.Timestamp, error) {
	s, err := o.optionalString("expiresAt", "expires_at")
	if err != nil || s == nil {
		return nil, err
	}
	t, err := time.Parse(time.RFC3339Nano, *s)
	if err != nil {
		return nil, decodeError(o.field("expiresAt"), "not an RFC 3339 timestamp: %q", Abbrev(*s))
	}
	if t.Before(minExpiry) || t.After(maxExpiry) {
		return nil, decodeError(o.field("expiresAt"), "%q is outside the signed 64-bit nanosecond range (CTYPE-030)", Abbrev(*s))
	}
	return timestamppb.New(t.UTC()), nil
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}
