package codec

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	ct "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents/content_types"
)

// TypeMultiRemoteAttachment is this type's identifier, spelled as the reference client spells it.
var TypeMultiRemoteAttachment = TypeID{"xmtp.org", "multiRemoteStaticAttachment", 1, 0}

// MultiRemoteAttachmentCodec is xmtp.org/multiRemoteStaticAttachment:1.0:
// a protobuf MultiRemoteAttachment, each entry under the same parameter
// rules as a single remote attachment.
type MultiRemoteAttachmentCodec struct{}

func (MultiRemoteAttachmentCodec) ContentType() TypeID { return TypeMultiRemoteAttachment }
func (MultiRemoteAttachmentCodec) ShouldPush() bool    { return true }

const multiRemoteFallback = "Can't display this content. This app doesn't support multiple remote attachments."

func (MultiRemoteAttachmentCodec) Encode(v any) (*mc.EncodedContent, error) {
	m, ok := v.(*ct.MultiRemoteAttachment)
	if !ok || m == nil {
		return nil, wrongValue("a *MultiRemoteAttachment", v)
	}
	for i, a := range m.GetAttachments() {
		if err := checkRemoteParams(fmt.Sprintf("multi_remote_attachment.attachments[%d]", i), infoFields(a), encodeError); err != nil {
			return nil, err
		}
	}
	b, err := deterministic.Marshal(m)
	if err != nil {
		return nil, encodeError("", "marshal: %v", err)
	}
	return envelope(TypeMultiRemoteAttachment, b, nil, ptr(multiRemoteFallback)), nil
}

func (MultiRemoteAttachmentCodec) Decode(ec *mc.EncodedContent, _ NestedDecoder) (any, error) {
	m := new(ct.MultiRemoteAttachment)
	if err := proto.Unmarshal(ec.GetContent(), m); err != nil {
		return nil, decodeError("content", "not a MultiRemoteAttachment: %v", err)
	}
	for i, a := range m.GetAttachments() {
		a.Scheme = normalizeScheme(a.GetScheme())
		if err := checkRemoteParams(fmt.Sprintf("attachments[%d]", i), infoFields(a), decodeError); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func infoFields(a *ct.RemoteAttachmentInfo) remoteFields {
	return remoteFields{url: a.GetUrl(), digest: a.GetContentDigest(), secret: a.GetSecret(), salt: a.GetSalt(), nonce: a.GetNonce(), scheme: a.GetScheme()}
}
