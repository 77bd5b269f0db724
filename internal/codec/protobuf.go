package codec

import (
	"google.golang.org/protobuf/proto"

	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
)

// encodeProto and decodeProto serve the catalogue types whose content is a
// protobuf message with no parameters and no fallback.
func encodeProto[M proto.Message](t TypeID, v any, name string) (*mc.EncodedContent, error) {
	m, ok := v.(M)
	if !ok {
		return nil, wrongValue("a *"+name, v)
	}
	b, err := deterministic.Marshal(m)
	if err != nil {
		return nil, encodeError("", "marshal: %v", err)
	}
	return envelope(t, b, nil, nil), nil
}

func decodeProto[M proto.Message](ec *mc.EncodedContent, m M, name string) (M, error) {
	if err := proto.Unmarshal(ec.GetContent(), m); err != nil {
		var zero M
		return zero, decodeError("content", "not a %s: %v", name, err)
	}
	return m, nil
}
