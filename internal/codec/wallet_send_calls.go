package codec

import (
	"bytes"
	"sort"

	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
)

// TypeWalletSendCalls is this type's identifier, spelled as the reference client spells it.
var TypeWalletSendCalls = TypeID{"xmtp.org", "walletSendCalls", 1, 0}

// WalletSendCallsCodec is xmtp.org/walletSendCalls:1.0: JSON WalletSendCalls
// (section 7.2).
type WalletSendCallsCodec struct{}

func (WalletSendCallsCodec) ContentType() TypeID { return TypeWalletSendCalls }
func (WalletSendCallsCodec) ShouldPush() bool    { return true }

type walletSendCallsJSON struct {
	Version      string            `json:"version"`
	ChainID      string            `json:"chainId"`
	From         string            `json:"from"`
	Calls        []walletCallJSON  `json:"calls"`
	Capabilities map[string]string `json:"capabilities,omitempty"`
}

type walletCallJSON struct {
	To       *string                 `json:"to,omitempty"`
	Data     *string                 `json:"data,omitempty"`
	Value    *string                 `json:"value,omitempty"`
	Gas      *string                 `json:"gas,omitempty"`
	Metadata *walletCallMetadataJSON `json:"metadata,omitempty"`
}

// walletCallMetadataJSON writes description and transactionType first, as
// the reference does, then the additional members in sorted order.
type walletCallMetadataJSON struct {
	description, transactionType string
	additional                   map[string]string
}

func (m *walletCallMetadataJSON) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	write := func(k, v string) error {
		if buf.Len() > 1 {
			buf.WriteByte(',')
		}
		for _, s := range []string{k, v} {
			b, err := marshalJSON(s)
			if err != nil {
				return err
			}
			buf.Write(b)
			if s == k {
				buf.WriteByte(':')
			}
		}
		return nil
	}
	if err := write(memberDescription, m.description); err != nil {
		return nil, err
	}
	if err := write(memberTransactionType, m.transactionType); err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(m.additional))
	for k := range m.additional {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := write(k, m.additional[k]); err != nil {
			return nil, err
		}
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

const (
	memberDescription     = "description"
	memberTransactionType = "transactionType"
)

func (WalletSendCallsCodec) Encode(v any) (*mc.EncodedContent, error) {
	w, ok := v.(*WalletSendCalls)
	if !ok || w == nil {
		return nil, wrongValue("a *WalletSendCalls", v)
	}
	for _, f := range []struct{ name, value string }{{"version", w.Version}, {"chain_id", w.ChainID}, {"from", w.From}} {
		if f.value == "" {
			return nil, encodeError("wallet_send_calls."+f.name, "required")
		}
	}
	out := walletSendCallsJSON{Version: w.Version, ChainID: w.ChainID, From: w.From, Calls: []walletCallJSON{}}
	// omitempty leaves an empty map out, as before values were the codec's.
	out.Capabilities = w.Capabilities
	for i, c := range w.Calls {
		call := walletCallJSON{To: c.To, Data: c.Data, Value: c.Value, Gas: c.Gas}
		if m := c.Metadata; m != nil {
			path := indexPath("wallet_send_calls.calls", i) + ".metadata"
			if m.Description == "" {
				return nil, encodeError(path+".description", "required")
			}
			if m.TransactionType == "" {
				return nil, encodeError(path+".transaction_type", "required")
			}
			for k := range m.Additional {
				if k == memberDescription || k == memberTransactionType {
					return nil, encodeError(path+".additional", "member %q collides with a named member", Abbrev(k))
				}
			}
			call.Metadata = &walletCallMetadataJSON{m.Description, m.TransactionType, m.Additional}
		}
		out.Calls = append(out.Calls, call)
	}
	b, err := marshalJSON(out)
	if err != nil {
		return nil, err
	}
	fallback := "[Transaction request generated]: " + string(b)
	return envelope(TypeWalletSendCalls, b, nil, &fallback), nil
}

func (WalletSendCallsCodec) Decode(ec *mc.EncodedContent, _ NestedDecoder) (any, error) {
	return decodeWalletSendCalls(ec.GetContent())
}

func decodeWalletSendCalls(b []byte) (*WalletSendCalls, error) {
	o, err := parseJSONObject(b, "")
	if err != nil {
		return nil, err
	}
	w := new(WalletSendCalls)
	if w.Version, err = o.requiredString("version"); err != nil {
		return nil, err
	}
	if w.ChainID, err = o.requiredString("chainId"); err != nil {
		return nil, err
	}
	if w.From, err = o.requiredString("from"); err != nil {
		return nil, err
	}
	calls, err := o.requiredArray("calls")
	if err != nil {
		return nil, err
	}
	for i, raw := range calls {
		co, err := parseJSONObject(raw, indexPath("calls", i))
		if err != nil {
			return nil, err
		}
		c := new(WalletCall)
		for _, f := range []struct {
			name string
			dst  **string
		}{{"to", &c.To}, {"data", &c.Data}, {"value", &c.Value}, {"gas", &c.Gas}} {
			if *f.dst, err = co.optionalString(f.name); err != nil {
				return nil, err
			}
		}
		mo, ok, err := co.optionalObject("metadata")
		if err != nil {
			return nil, err
		}
		if ok {
			m := new(WalletCallMetadata)
			if m.Description, err = mo.requiredString(memberDescription); err != nil {
				return nil, err
			}
			if m.TransactionType, err = mo.requiredString(memberTransactionType); err != nil {
				return nil, err
			}
			if m.Additional, err = mo.stringMap(memberDescription, memberTransactionType); err != nil {
				return nil, err
			}
			c.Metadata = m
		}
		w.Calls = append(w.Calls, c)
	}
	co, ok, err := o.optionalObject("capabilities")
	if err != nil {
		return nil, err
	}
	if ok {
		values, err := co.stringMap()
		if err != nil {
			return nil, err
		}
		w.Capabilities = values
	}
	return w, nil
}
