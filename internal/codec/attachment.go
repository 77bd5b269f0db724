package codec

import (
	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
)

// TypeAttachment is this type's identifier, spelled as the reference client spells it.
var TypeAttachment = TypeID{"xmtp.org", "attachment", 1, 0}

// AttachmentCodec is xmtp.org/attachment:1.0: the file bytes, with mimeType
// and an optional filename.
type AttachmentCodec struct{}

func (AttachmentCodec) ContentType() TypeID { return TypeAttachment }
func (AttachmentCodec) ShouldPush() bool    { return true }

const (
	paramMimeType = "mimeType"
	paramFilename = "filename"
)

func (AttachmentCodec) Encode(v any) (*mc.EncodedContent, error) {
	a, ok := v.(*Attachment)
	if !ok || a == nil {
		return nil, wrongValue("an *Attachment", v)
	}
	if a.MimeType == "" {
		return nil, encodeError("attachment.mime_type", "required")
	}
	params := map[string]string{paramMimeType: a.MimeType}
	if a.Filename != nil {
		params[paramFilename] = *a.Filename
	}
	fallback := "Can't display " + displayName(a.Filename) + ". This app doesn't support attachments."
	return envelope(TypeAttachment, a.Data, params, &fallback), nil
}

func (AttachmentCodec) Decode(ec *mc.EncodedContent, _ NestedDecoder) (any, error) {
	params := ec.GetParameters()
	mime, ok := params[paramMimeType]
	if !ok {
		return nil, decodeError("parameters.mimeType", "required")
	}
	a := &Attachment{MimeType: mime, Data: ec.GetContent()}
	if name, ok := params[paramFilename]; ok {
		a.Filename = &name
	}
	return a, nil
}

// displayName is how the reference's attachment fallbacks name a file.
func displayName(filename *string) string {
	if filename == nil || *filename == "" {
		return "this content"
	}
	return *filename
}
