package codec

import (
	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
)

// TypeReadReceipt is this type's identifier, spelled as the reference client spells it.
var TypeReadReceipt = TypeID{"xmtp.org", "readReceipt", 1, 0}

// ReadReceiptCodec is xmtp.org/readReceipt:1.0: empty content.
type ReadReceiptCodec struct{}

func (ReadReceiptCodec) ContentType() TypeID { return TypeReadReceipt }
func (ReadReceiptCodec) ShouldPush() bool    { return false }

func (ReadReceiptCodec) Encode(v any) (*mc.EncodedContent, error) {
	if _, ok := v.(*ReadReceipt); !ok {
		return nil, wrongValue("a *ReadReceipt", v)
	}
	return envelope(TypeReadReceipt, nil, nil, nil), nil
}

// Decode ignores the content: the type carries no members, and a later
// minor version may add some (CTYPE-016).
func (ReadReceiptCodec) Decode(*mc.EncodedContent, NestedDecoder) (any, error) {
	return &ReadReceipt{}, nil
}
