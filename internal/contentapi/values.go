package contentapi

import (
	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/codec"
)

// The codec's own values and the API's messages of the same shape, member
// for member. Each mapping keeps nil as nil, so that the codec, not the
// mapping, refuses a missing value with its own error; slices and byte
// fields are shared, not copied: a value lives as long as its message.

// AttachmentValue is an API attachment as the codec's value.
func AttachmentValue(m *cb.Attachment) *codec.Attachment {
	if m == nil {
		return nil
	}
	return &codec.Attachment{Filename: m.Filename, MimeType: m.MimeType, Data: m.Data}
}

// AttachmentMessage is the codec's attachment as the API's message.
func AttachmentMessage(v *codec.Attachment) *cb.Attachment {
	if v == nil {
		return nil
	}
	return &cb.Attachment{Filename: v.Filename, MimeType: v.MimeType, Data: v.Data}
}

// RemoteAttachmentValue is an API remote attachment as the codec's value.
func RemoteAttachmentValue(m *cb.RemoteAttachment) *codec.RemoteAttachment {
	if m == nil {
		return nil
	}
	return &codec.RemoteAttachment{
		URL: m.Url, ContentDigest: m.ContentDigest, Secret: m.Secret, Salt: m.Salt, Nonce: m.Nonce,
		Scheme: m.Scheme, ContentLength: m.ContentLength, Filename: m.Filename,
	}
}

// RemoteAttachmentMessage is the codec's remote attachment as the API's message.
func RemoteAttachmentMessage(v *codec.RemoteAttachment) *cb.RemoteAttachment {
	if v == nil {
		return nil
	}
	return &cb.RemoteAttachment{
		Url: v.URL, ContentDigest: v.ContentDigest, Secret: v.Secret, Salt: v.Salt, Nonce: v.Nonce,
		Scheme: v.Scheme, ContentLength: v.ContentLength, Filename: v.Filename,
	}
}

func readReceiptValue(m *cb.ReadReceipt) *codec.ReadReceipt {
	if m == nil {
		return nil
	}
	return &codec.ReadReceipt{}
}

func transactionReferenceValue(m *cb.TransactionReference) *codec.TransactionReference {
	if m == nil {
		return nil
	}
	v := &codec.TransactionReference{Namespace: m.Namespace, NetworkID: m.NetworkId, Reference: m.Reference}
	if md := m.Metadata; md != nil {
		v.Metadata = &codec.TransactionMetadata{
			TransactionType: md.TransactionType, Currency: md.Currency, Amount: md.Amount,
			Decimals: md.Decimals, FromAddress: md.FromAddress, ToAddress: md.ToAddress,
		}
	}
	return v
}

func transactionReferenceMessage(v *codec.TransactionReference) *cb.TransactionReference {
	m := &cb.TransactionReference{Namespace: v.Namespace, NetworkId: v.NetworkID, Reference: v.Reference}
	if md := v.Metadata; md != nil {
		m.Metadata = &cb.TransactionMetadata{
			TransactionType: md.TransactionType, Currency: md.Currency, Amount: md.Amount,
			Decimals: md.Decimals, FromAddress: md.FromAddress, ToAddress: md.ToAddress,
		}
	}
	return m
}

func walletSendCallsValue(m *cb.WalletSendCalls) *codec.WalletSendCalls {
	if m == nil {
		return nil
	}
	v := &codec.WalletSendCalls{Version: m.Version, ChainID: m.ChainId, From: m.From}
	if m.Capabilities != nil {
		v.Capabilities = m.Capabilities.Values
		if v.Capabilities == nil {
			v.Capabilities = map[string]string{}
		}
	}
	v.Calls = make([]*codec.WalletCall, 0, len(m.Calls))
	for _, c := range m.Calls {
		if c == nil { // only a message built in Go holds one
			c = &cb.WalletCall{}
		}
		call := &codec.WalletCall{To: c.To, Data: c.Data, Value: c.Value, Gas: c.Gas}
		if md := c.Metadata; md != nil {
			call.Metadata = &codec.WalletCallMetadata{Description: md.Description, TransactionType: md.TransactionType, Additional: md.Additional}
		}
		v.Calls = append(v.Calls, call)
	}
	return v
}

func walletSendCallsMessage(v *codec.WalletSendCalls) *cb.WalletSendCalls {
	m := &cb.WalletSendCalls{Version: v.Version, ChainId: v.ChainID, From: v.From}
	if v.Capabilities != nil {
		m.Capabilities = &cb.StringMap{Values: v.Capabilities}
	}
	for _, c := range v.Calls {
		call := &cb.WalletCall{To: c.To, Data: c.Data, Value: c.Value, Gas: c.Gas}
		if md := c.Metadata; md != nil {
			call.Metadata = &cb.WalletCallMetadata{Description: md.Description, TransactionType: md.TransactionType, Additional: md.Additional}
		}
		m.Calls = append(m.Calls, call)
	}
	return m
}

func actionsValue(m *cb.Actions) *codec.Actions {
	if m == nil {
		return nil
	}
	v := &codec.Actions{ID: m.Id, Description: m.Description, ExpiresAt: m.ExpiresAt, Actions: make([]*codec.Action, 0, len(m.Actions))}
	for _, a := range m.Actions {
		if a == nil { // only a message built in Go holds one
			a = &cb.Action{}
		}
		v.Actions = append(v.Actions, &codec.Action{
			ID: a.Id, Label: a.Label, ImageURL: a.ImageUrl, Style: codec.ActionStyle(a.Style), ExpiresAt: a.ExpiresAt,
		})
	}
	return v
}

func actionsMessage(v *codec.Actions) *cb.Actions {
	m := &cb.Actions{Id: v.ID, Description: v.Description, ExpiresAt: v.ExpiresAt}
	for _, a := range v.Actions {
		m.Actions = append(m.Actions, &cb.Action{
			Id: a.ID, Label: a.Label, ImageUrl: a.ImageURL, Style: cb.ActionStyle(a.Style), ExpiresAt: a.ExpiresAt,
		})
	}
	return m
}

func intentValue(m *cb.Intent) *codec.Intent {
	if m == nil {
		return nil
	}
	return &codec.Intent{ID: m.Id, ActionID: m.ActionId, Metadata: m.Metadata}
}

func intentMessage(v *codec.Intent) *cb.Intent {
	return &cb.Intent{Id: v.ID, ActionId: v.ActionID, Metadata: v.Metadata}
}
