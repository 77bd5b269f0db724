package contentapi

import (
	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	ct "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents/content_types"
	"github.com/contentbackup/contentbackup/internal/codec"
)

// member is one content type's place in the API: its member of Content,
// and how that member's message becomes the codec's value and back. The
// codec's value for a type is the wire message of its content format, a
// string for text and markdown, a codec.Reply for replies, or the codec's
// own value (values.go maps it).
type member struct {
	Type codec.TypeID
	// fromContent is the value to encode when c holds this type.
	fromContent func(reg *codec.Registry, c *cb.Content, depth int) (v any, ok bool, err error)
	// toContent wraps a decoded value of this type in a Content message.
	toContent func(d codec.Decoded) (*cb.Content, bool)
}

// valueMember builds fromContent for a Content member holding the value itself.
func valueMember[W any, V any](get func(W) V) func(*codec.Registry, *cb.Content, int) (any, bool, error) {
	return func(_ *codec.Registry, c *cb.Content, _ int) (any, bool, error) {
		w, ok := c.GetValue().(W)
		if !ok {
			return nil, false, nil
		}
		return get(w), true, nil
	}
}

// content builds toContent for a value of type V.
func content[V any](wrapValue func(V) *cb.Content) func(codec.Decoded) (*cb.Content, bool) {
	return func(d codec.Decoded) (*cb.Content, bool) { return wrap(d.Value, wrapValue) }
}

func wrap[T any](v any, f func(T) *cb.Content) (*cb.Content, bool) {
	t, ok := v.(T)
	if !ok {
		return nil, false
	}
	return f(t), true
}

// members is the one table of the API's content types, a row for each of
// the codec's descriptors.
var members = []member{
	{Type: codec.TypeText,
		fromContent: valueMember(func(w *cb.Content_Text) any { return w.Text }),
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
	{Type: codec.TypeMarkdown,
		fromContent: valueMember(func(w *cb.Content_Markdown) any { return w.Markdown }),
		toContent:   content(func(v string) *cb.Content { return &cb.Content{Value: &cb.Content_Markdown{Markdown: v}} })},
	{Type: codec.TypeReaction,
		fromContent: valueMember(func(w *cb.Content_Reaction) any { return w.Reaction }),
		toContent:   content(func(v *ct.ReactionV2) *cb.Content { return &cb.Content{Value: &cb.Content_Reaction{Reaction: v}} })},
	{Type: codec.TypeLegacyReaction,
		fromContent: valueMember(func(w *cb.Content_LegacyReaction) any { return w.LegacyReaction }),
		toContent: content(func(v *ct.ReactionV2) *cb.Content {
			return &cb.Content{Value: &cb.Content_LegacyReaction{LegacyReaction: v}}
		})},
	{Type: codec.TypeReply,
		fromContent: func(reg *codec.Registry, c *cb.Content, depth int) (any, bool, error) {
			w, ok := c.GetValue().(*cb.Content_Reply)
			if !ok {
				return nil, false, nil
			}
			reply, err := replies.value(reg, w.Reply, depth)
			return reply, true, err
		},
		toContent: func(d codec.Decoded) (*cb.Content, bool) {
			return wrap(d.Value, func(v *codec.Reply) *cb.Content {
				// The reply's own content is the nested envelope's original bytes.
				return &cb.Content{Value: &cb.Content_Reply{Reply: replies.message(v, d.Envelope.GetContent())}}
			})
		}},
	{Type: codec.TypeReadReceipt,
		fromContent: valueMember(func(w *cb.Content_ReadReceipt) any { return readReceiptValue(w.ReadReceipt) }),
		toContent: content(func(*codec.ReadReceipt) *cb.Content {
			return &cb.Content{Value: &cb.Content_ReadReceipt{ReadReceipt: &cb.ReadReceipt{}}}
		})},
	{Type: codec.TypeAttachment,
		fromContent: valueMember(func(w *cb.Content_Attachment) any { return AttachmentValue(w.Attachment) }),
		toContent: content(func(v *codec.Attachment) *cb.Content {
			return &cb.Content{Value: &cb.Content_Attachment{Attachment: AttachmentMessage(v)}}
		})},
	{Type: codec.TypeRemoteAttachment,
		fromContent: valueMember(func(w *cb.Content_RemoteAttachment) any { return RemoteAttachmentValue(w.RemoteAttachment) }),
		toContent: content(func(v *codec.RemoteAttachment) *cb.Content {
			return &cb.Content{Value: &cb.Content_RemoteAttachment{RemoteAttachment: RemoteAttachmentMessage(v)}}
		})},
	{Type: codec.TypeMultiRemoteAttachment,
		fromContent: valueMember(func(w *cb.Content_MultiRemoteAttachment) any { return w.MultiRemoteAttachment }),
		toContent: content(func(v *ct.MultiRemoteAttachment) *cb.Content {
			return &cb.Content{Value: &cb.Content_MultiRemoteAttachment{MultiRemoteAttachment: v}}
		})},
	{Type: codec.TypeTransactionReference,
		fromContent: valueMember(func(w *cb.Content_TransactionReference) any { return transactionReferenceValue(w.TransactionReference) }),
		toContent: content(func(v *codec.TransactionReference) *cb.Content {
			return &cb.Content{Value: &cb.Content_TransactionReference{TransactionReference: transactionReferenceMessage(v)}}
		})},
	{Type: codec.TypeWalletSendCalls,
		fromContent: valueMember(func(w *cb.Content_WalletSendCalls) any { return walletSendCallsValue(w.WalletSendCalls) }),
		toContent: content(func(v *codec.WalletSendCalls) *cb.Content {
			return &cb.Content{Value: &cb.Content_WalletSendCalls{WalletSendCalls: walletSendCallsMessage(v)}}
		})},
	{Type: codec.TypeActions,
		fromContent: valueMember(func(w *cb.Content_Actions) any { return actionsValue(w.Actions) }),
		toContent: content(func(v *codec.Actions) *cb.Content {
			return &cb.Content{Value: &cb.Content_Actions{Actions: actionsMessage(v)}}
		})},
	{Type: codec.TypeIntent,
		fromContent: valueMember(func(w *cb.Content_Intent) any { return intentValue(w.Intent) }),
		toContent: content(func(v *codec.Intent) *cb.Content {
			return &cb.Content{Value: &cb.Content_Intent{Intent: intentMessage(v)}}
		})},
	{Type: codec.TypeGroupUpdated,
		fromContent: valueMember(func(w *cb.Content_GroupUpdated) any { return w.GroupUpdated }),
		toContent: content(func(v *mc.GroupUpdated) *cb.Content {
			return &cb.Content{Value: &cb.Content_GroupUpdated{GroupUpdated: v}}
		})},
	{Type: codec.TypeGroupMembershipChange,
		fromContent: valueMember(func(w *cb.Content_GroupMembershipChange) any { return w.GroupMembershipChange }),
		toContent: content(func(v *mc.GroupMembershipChanges) *cb.Content {
			return &cb.Content{Value: &cb.Content_GroupMembershipChange{GroupMembershipChange: v}}
		})},
	{Type: codec.TypeLeaveRequest,
		fromContent: valueMember(func(w *cb.Content_LeaveRequest) any { return w.LeaveRequest }),
		toContent: content(func(v *ct.LeaveRequest) *cb.Content {
			return &cb.Content{Value: &cb.Content_LeaveRequest{LeaveRequest: v}}
		})},
	{Type: codec.TypeDeleteMessage,
		fromContent: valueMember(func(w *cb.Content_DeleteMessage) any { return w.DeleteMessage }),
		toContent: content(func(v *ct.DeleteMessage) *cb.Content {
			return &cb.Content{Value: &cb.Content_DeleteMessage{DeleteMessage: v}}
		})},
	{Type: codec.TypeEditMessage,
		fromContent: valueMember(func(w *cb.Content_EditMessage) any { return w.EditMessage }),
		toContent: content(func(v *ct.EditMessage) *cb.Content {
			return &cb.Content{Value: &cb.Content_EditMessage{EditMessage: v}}
		})}}

// replies maps replies to and from the API. The reply's mapping recurses
// through the table (its nested content is any type), so the table reaches
// it through an interface: a static reference would make the table's
// initialization depend on itself.
var replies replyMapper = replyMapping{}

type replyMapper interface {
	value(reg *codec.Registry, rp *cb.Reply, depth int) (*codec.Reply, error)
	message(v *codec.Reply, raw []byte) *cb.Reply
}

type replyMapping struct{}

func (replyMapping) value(reg *codec.Registry, rp *cb.Reply, depth int) (*codec.Reply, error) {
	return replyValue(reg, rp, depth)
}
func (replyMapping) message(v *codec.Reply, raw []byte) *cb.Reply { return replyMessage(v, raw) }

// memberByKey finds a type's row for the per-message lookups of decode.
var memberByKey = func() map[codec.Key]*member {
	m := make(map[codec.Key]*member, len(members))
	for i := range members {
		m[members[i].Type.Key()] = &members[i]
	}
	return m
}()
