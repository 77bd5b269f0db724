package codec

import (
	"encoding/json"
	"math"
	"math/big"
	"strconv"

	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
)

// TypeTransactionReference is this type's identifier, spelled as the reference client spells it.
var TypeTransactionReference = TypeID{"xmtp.org", "transactionReference", 1, 0}

// TransactionReferenceCodec is xmtp.org/transactionReference:1.0: JSON
// TransactionReference (section 7.2).
type TransactionReferenceCodec struct{}

func (TransactionReferenceCodec) ContentType() TypeID { return TypeTransactionReference }
func (TransactionReferenceCodec) ShouldPush() bool    { return true }

type transactionReferenceJSON struct {
	Namespace *string                  `json:"namespace,omitempty"`
	NetworkID string                   `json:"networkId"`
	Reference string                   `json:"reference"`
	Metadata  *transactionMetadataJSON `json:"metadata,omitempty"`
}

type transactionMetadataJSON struct {
	TransactionType string  `json:"transactionType"`
	Currency        string  `json:"currency"`
	Amount          float64 `json:"amount"`
	Decimals        uint32  `json:"decimals"`
	FromAddress     string  `json:"fromAddress"`
	ToAddress       string  `json:"toAddress"`
}

func (TransactionReferenceCodec) Encode(v any) (*mc.EncodedContent, error) {
	tr, ok := v.(*TransactionReference)
	if !ok || tr == nil {
		return nil, wrongValue("a *TransactionReference", v)
	}
	if tr.NetworkID == "" {
		return nil, encodeError("transaction_reference.network_id", "required")
	}
	out := transactionReferenceJSON{Namespace: tr.Namespace, NetworkID: tr.NetworkID, Reference: tr.Reference}
	if m := tr.Metadata; m != nil {
		for _, f := range []struct{ name, value string }{
			{"transaction_type", m.TransactionType}, {"currency", m.Currency},
			{"from_address", m.FromAddress}, {"to_address", m.ToAddress},
		} {
			if f.value == "" {
				return nil, encodeError("transaction_reference.metadata."+f.name, "required")
			}
		}
		if math.IsNaN(m.Amount) || math.IsInf(m.Amount, 0) {
			return nil, encodeError("transaction_reference.metadata.amount", "must be a finite number")
		}
		out.Metadata = &transactionMetadataJSON{
			TransactionType: m.TransactionType, Currency: m.Currency, Amount: m.Amount,
			Decimals: m.Decimals, FromAddress: m.FromAddress, ToAddress: m.ToAddress,
		}
	}
	b, err := marshalJSON(out)
	if err != nil {
		return nil, err
	}
	fallback := "Crypto transaction"
	if tr.Reference != "" {
		fallback = "[Crypto transaction] Use a blockchain explorer to learn more using the transaction hash: " + tr.Reference
	}
	return envelope(TypeTransactionReference, b, nil, &fallback), nil
}

func (TransactionReferenceCodec) Decode(ec *mc.EncodedContent, _ NestedDecoder) (any, error) {
	return decodeTransactionReference(ec.GetContent())
}

func decodeTransactionReference(b []byte) (*TransactionReference, error) {
	o, err := parseJSONObject(b, "")
	if err != nil {
		return nil, err
	}
	tr := new(TransactionReference)
	if tr.Namespace, err = o.optionalString("namespace"); err != nil {
		return nil, err
	}
	if tr.NetworkID, err = networkID(o); err != nil {
		return nil, err
	}
	if tr.Reference, err = o.requiredString("reference"); err != nil {
		return nil, err
	}
	mo, ok, err := o.optionalObject("metadata")
	if err != nil || !ok {
		return tr, err
	}
	m := new(TransactionMetadata)
	for _, f := range []struct {
		name string
		dst  *string
	}{
		{"transactionType", &m.TransactionType}, {"currency", &m.Currency},
		{"fromAddress", &m.FromAddress}, {"toAddress", &m.ToAddress},
	} {
		if *f.dst, err = mo.requiredString(f.name); err != nil {
			return nil, err
		}
	}
	raw, _, ok := mo.lookup("amount")
	if !ok {
		return nil, decodeError("metadata.amount", "required member missing")
	}
	if err := json.Unmarshal(raw, &m.Amount); err != nil {
		return nil, decodeError("metadata.amount", "must be a number")
	}
	raw, _, ok = mo.lookup("decimals")
	if !ok {
		return nil, decodeError("metadata.decimals", "required member missing")
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil {
		return nil, decodeError("metadata.decimals", "must be a number")
	}
	d, err := strconv.ParseUint(n.String(), 10, 32)
	if err != nil {
		return nil, decodeError("metadata.decimals", "must be an integer from 0 through 4294967295, got %s", n)
	}
	m.Decimals = uint32(d)
	tr.Metadata = m
	return tr, nil
}

// networkID accepts a string or a number; a number comes back as its
// decimal text (the reference writes a string, other SDKs a number).
func networkID(o jsonObject) (string, error) {
	raw, _, ok := o.lookup("networkId")
	if !ok {
		return "", decodeError("networkId", "required member missing")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil {
		return "", decodeError("networkId", "must be a string or a number")
	}
	if _, err := strconv.ParseInt(n.String(), 10, 64); err == nil {
		return n.String(), nil
	}
	f, _, err := big.ParseFloat(n.String(), 10, 256, big.ToNearestEven)
	if err != nil {
		return "", decodeError("networkId", "not a number: %s", n)
	}
	return f.Text('f', -1), nil
}
