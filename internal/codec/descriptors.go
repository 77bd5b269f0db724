package codec

import (
	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	ct "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents/content_types"
)

// Descriptor is everything the package knows about one content type, in
// one row: its catalogue entry (CTYPE section 7), its codec, whether its
// content is JSON (section 7.2), and how its value maps to and from the
// API's Content message. Adding a type is its own file (the codec and its
// TypeID), its member of Content in content.proto, and a row here.
type Descriptor struct {
	Entry
	// Catalogued: a row of the catalogue table. The legacy reaction 1.0
	// decodes but is outside it (CTYPE-022).
	Catalogued bool
	Codec      Codec
	// JSON: the content is JSON, which decoding expands more than bytes.
	JSON bool
	// fromContent is the value to encode when c holds this type.
	fromContent func(r *Registry, c *cb.Content, depth int) (v any, ok bool, err error)
	// toContent wraps a decoded value of this type in a Content message.
	toContent func(d Decoded) (*cb.Content, bool)
}

// member builds fromContent for a Content member holding the value itself.
func member[W any, V any](get func(W) V) func(*Registry, *cb.Content, int) (any, bool, error) {
	return func(_ *Registry, c *cb.Content, _ int) (any, bool, error) {
		w, ok := c.GetValue().(W)
		if !ok {
			return nil, false, nil
		}
		return get(w), true, nil
	}
}

// content builds toContent for a value of type V.
func content[V any](wrapValue func(V) *cb.Content) func(Decoded) (*cb.Content, bool) {
	return func(d Decoded) (*cb.Content, bool) { return wrap(d.Value, wrapValue) }
}

// descriptors is the one table of content types.
var descriptors = []Descriptor{
	{Entry: Entry{Type: TypeText, Push: true, Deletable: true}, Catalogued: true, Codec: TextCodec{},
		fromContent: member(func(w *cb.Content_Text) any { return w.Text }),
		toContent: content(func(v string) *cb.Content {
			// One allocation for the message and its oneof wrapper: text is
			// most of what DecodeBatch sees.
			both := &struct {
				c cb.Content
				v cb.Content_Text
			}{v: cb.Content_Text{Text: v}}
			both.c.Value = &both.v
			return &both.c
		})},
	{Entry: Entry{Type: TypeMarkdown, Push: true, Deletable: true}, Catalogued: true, Codec: MarkdownCodec{},
		fromContent: member(func(w *cb.Content_Markdown) any { return w.Markdown }),
		toContent:   content(func(v string) *cb.Content { return &cb.Content{Value: &cb.Content_Markdown{Markdown: v}} })},
	{Entry: Entry{Type: TypeReaction}, Catalogued: true, Codec: ReactionCodec{},
		fromContent: member(func(w *cb.Content_Reaction) any { return w.Reaction }),
		toContent:   content(func(v *ct.ReactionV2) *cb.Content { return &cb.Content{Value: &cb.Content_Reaction{Reaction: v}} })},
	{Entry: Entry{Type: TypeLegacyReaction}, Codec: LegacyReactionCodec{}, JSON: true,
		fromContent: member(func(w *cb.Content_LegacyReaction) any { return w.LegacyReaction }),
		toContent: content(func(v *ct.ReactionV2) *cb.Content {
			return &cb.Content{Value: &cb.Content_LegacyReaction{LegacyReaction: v}}
		})},
	{Entry: Entry{Type: TypeReply, Push: true, Deletable: true}, Catalogued: true, Codec: ReplyCodec{},
		fromContent: func(r *Registry, c *cb.Content, depth int) (any, bool, error) {
			w, ok := c.GetValue().(*cb.Content_Reply)
			if !ok {
				return nil, false, nil
			}
			reply, err := replies.value(r, w.Reply, depth)
			return reply, true, err
		},
		toContent: func(d Decoded) (*cb.Content, bool) {
			return wrap(d.Value, func(v *Reply) *cb.Content {
				// The reply's own content is the nested envelope's original bytes.
				return &cb.Content{Value: &cb.Content_Reply{Reply: replies.message(v, d.Envelope.GetContent())}}
			})
		}},
	{Entry: Entry{Type: TypeReadReceipt}, Catalogued: true, Codec: ReadReceiptCodec{},
		fromContent: member(func(w *cb.Content_ReadReceipt) any { return w.ReadReceipt }),
		toContent: content(func(v *cb.ReadReceipt) *cb.Content {
			return &cb.Content{Value: &cb.Content_ReadReceipt{ReadReceipt: v}}
		})},
	{Entry: Entry{Type: TypeAttachment, Push: true, Deletable: true}, Catalogued: true, Codec: AttachmentCodec{},
		fromContent: member(func(w *cb.Content_Attachment) any { return w.Attachment }),
		toContent:   content(func(v *cb.Attachment) *cb.Content { return &cb.Content{Value: &cb.Content_Attachment{Attachment: v}} })},
	{Entry: Entry{Type: TypeRemoteAttachment, Push: true, Deletable: true}, Catalogued: true, Codec: RemoteAttachmentCodec{},
		fromContent: member(func(w *cb.Content_RemoteAttachment) any { return w.RemoteAttachment }),
		toContent: content(func(v *cb.RemoteAttachment) *cb.Content {
			return &cb.Content{Value: &cb.Content_RemoteAttachment{RemoteAttachment: v}}
		})},
	{Entry: Entry{Type: TypeMultiRemoteAttachment, Push: true, Deletable: true}, Catalogued: true, Codec: MultiRemoteAttachmentCodec{},
		fromContent: member(func(w *cb.Content_MultiRemoteAttachment) any { return w.MultiRemoteAttachment }),
		toContent: content(func(v *ct.MultiRemoteAttachment) *cb.Content {
			return &cb.Content{Value: &cb.Content_MultiRemoteAttachment{MultiRemoteAttachment: v}}
		})},
	{Entry: Entry{Type: TypeTransactionReference, Push: true, Deletable: true}, Catalogued: true, Codec: TransactionReferenceCodec{}, JSON: true,
		fromContent: member(func(w *cb.Content_TransactionReference) any { return w.TransactionReference }),
		toContent: content(func(v *cb.TransactionReference) *cb.Content {
			return &cb.Content{Value: &cb.Content_TransactionReference{TransactionReference: v}}
		})},
	{Entry: Entry{Type: TypeWalletSendCalls, Push: true, Deletable: true}, Catalogued: true, Codec: WalletSendCallsCodec{}, JSON: true,
		fromContent: member(func(w *cb.Content_WalletSendCalls) any { return w.WalletSendCalls }),
		toContent: content(func(v *cb.WalletSendCalls) *cb.Content {
			return &cb.Content{Value: &cb.Content_WalletSendCalls{WalletSendCalls: v}}
		})},
	{Entry: Entry{Type: TypeActions, Push: true}, Catalogued: true, Codec: ActionsCodec{}, JSON: true,
		fromContent: member(func(w *cb.Content_Actions) any { return w.Actions }),
		toContent:   content(func(v *cb.Actions) *cb.Content { return &cb.Content{Value: &cb.Content_Actions{Actions: v}} })},
	{Entry: Entry{Type: TypeIntent, Push: true}, Catalogued: true, Codec: IntentCodec{}, JSON: true,
		fromContent: member(func(w *cb.Content_Intent) any { return w.Intent }),
		toContent:   content(func(v *cb.Intent) *cb.Content { return &cb.Content{Value: &cb.Content_Intent{Intent: v}} })},
	{Entry: Entry{Type: TypeGroupUpdated, Transcript: true}, Catalogued: true, Codec: GroupUpdatedCodec{},
		fromContent: member(func(w *cb.Content_GroupUpdated) any { return w.GroupUpdated }),
		toContent: content(func(v *mc.GroupUpdated) *cb.Content {
			return &cb.Content{Value: &cb.Content_GroupUpdated{GroupUpdated: v}}
		})},
	{Entry: Entry{Type: TypeGroupMembershipChange, Transcript: true}, Catalogued: true, Codec: GroupMembershipChangeCodec{},
		fromContent: member(func(w *cb.Content_GroupMembershipChange) any { return w.GroupMembershipChange }),
		toContent: content(func(v *mc.GroupMembershipChanges) *cb.Content {
			return &cb.Content{Value: &cb.Content_GroupMembershipChange{GroupMembershipChange: v}}
		})},
	{Entry: Entry{Type: TypeLeaveRequest}, Catalogued: true, Codec: LeaveRequestCodec{},
		fromContent: member(func(w *cb.Content_LeaveRequest) any { return w.LeaveRequest }),
		toContent: content(func(v *ct.LeaveRequest) *cb.Content {
			return &cb.Content{Value: &cb.Content_LeaveRequest{LeaveRequest: v}}
		})},
	{Entry: Entry{Type: TypeDeleteMessage}, Catalogued: true, Codec: DeleteMessageCodec{},
		fromContent: member(func(w *cb.Content_DeleteMessage) any { return w.DeleteMessage }),
		toContent: content(func(v *ct.DeleteMessage) *cb.Content {
			return &cb.Content{Value: &cb.Content_DeleteMessage{DeleteMessage: v}}
		})},
	{Entry: Entry{Type: TypeEditMessage, Reserved: true}, Catalogued: true, Codec: EditMessageCodec{},
		fromContent: member(func(w *cb.Content_EditMessage) any { return w.EditMessage }),
		toContent: content(func(v *ct.EditMessage) *cb.Content {
			return &cb.Content{Value: &cb.Content_EditMessage{EditMessage: v}}
		})},
}

// replies maps replies to and from the API. The reply's mapping recurses
// through the table (its nested content is any type), so the table reaches
// it through an interface: a static reference would make the table's
// initialization depend on itself.
var replies replyMapper = replyMapping{}

type replyMapper interface {
	value(r *Registry, rp *cb.Reply, depth int) (*Reply, error)
	message(v *Reply, raw []byte) *cb.Reply
}

type replyMapping struct{}

func (replyMapping) value(r *Registry, rp *cb.Reply, depth int) (*Reply, error) {
	return r.replyValue(rp, depth)
}
func (replyMapping) message(v *Reply, raw []byte) *cb.Reply { return replyMessage(v, raw) }

// descriptorByKey finds a type's row for the per-message lookups of decode.
var descriptorByKey = func() map[Key]*Descriptor {
	m := make(map[Key]*Descriptor, len(descriptors))
	for i := range descriptors {
		m[descriptors[i].Type.Key()] = &descriptors[i]
	}
	return m
}()
