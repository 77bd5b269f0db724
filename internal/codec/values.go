package codec

import (
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The values of the types whose content is JSON or envelope parameters.
// They are the codec's own: internal/contentapi maps them onto the API's
// messages of the same shape, so the codecs hold no type of the service.
// Timestamps and free-form metadata keep protobuf's well-known types, which
// belong to no API and carry their own validity rules.

// ReadReceipt is xmtp.org/readReceipt:1.0's value: it carries nothing.
type ReadReceipt struct{}

// Attachment is xmtp.org/attachment:1.0's value.
type Attachment struct {
	// Filename is optional: nil when the envelope names no file.
	Filename *string
	MimeType string
	Data     []byte
}

// RemoteAttachment is xmtp.org/remoteStaticAttachment:1.0's value: where
// the encrypted attachment lies and how to open it (CTYPE-015).
type RemoteAttachment struct {
	URL string
	// ContentDigest is the lowercase hex SHA-256 of the encrypted payload.
	ContentDigest string
	Secret        []byte
	Salt          []byte
	Nonce         []byte
	// Scheme is "https://", or a legacy form that decoding normalizes.
	Scheme        string
	ContentLength *uint32
	Filename      *string
}

// TransactionReference is xmtp.org/transactionReference:1.0's value.
type TransactionReference struct {
	Namespace *string
	// NetworkID is the chain, as text: a number on the wire comes back as
	// its decimal form.
	NetworkID string
	Reference string
	Metadata  *TransactionMetadata
}

// TransactionMetadata is a TransactionReference's optional metadata.
type TransactionMetadata struct {
	TransactionType string
	Currency        string
	Amount          float64
	Decimals        uint32
	FromAddress     string
	ToAddress       string
}

// WalletSendCalls is xmtp.org/walletSendCalls:1.0's value.
type WalletSendCalls struct {
	Version string
	ChainID string
	From    string
	Calls   []*WalletCall
	// Capabilities is nil when the member is absent; decoding gives a
	// present but empty member as an empty map, and encoding leaves an
	// empty map out.
	Capabilities map[string]string
}

// WalletCall is one call of a WalletSendCalls.
type WalletCall struct {
	To       *string
	Data     *string
	Value    *string
	Gas      *string
	Metadata *WalletCallMetadata
}

// WalletCallMetadata describes a WalletCall; Additional holds its members
// other than description and transactionType.
type WalletCallMetadata struct {
	Description     string
	TransactionType string
	Additional      map[string]string
}

// Actions is coinbase.com/actions:1.0's value.
type Actions struct {
	ID          string
	Description string
	Actions     []*Action
	ExpiresAt   *timestamppb.Timestamp
}

// ActionStyle is an Action's optional style. Its numbers are the API's
// ActionStyle numbers, so the mapping between them is a conversion.
type ActionStyle int32

const (
	ActionStyleUnspecified ActionStyle = 0
	ActionStylePrimary     ActionStyle = 1
	ActionStyleSecondary   ActionStyle = 2
	ActionStyleDanger      ActionStyle = 3
)

// Action is one choice of an Actions.
type Action struct {
	ID        string
	Label     string
	ImageURL  *string
	Style     ActionStyle
	ExpiresAt *timestamppb.Timestamp
}

// Intent is coinbase.com/intent:1.0's value: the action a user chose.
type Intent struct {
	ID       string
	ActionID string
	Metadata *structpb.Struct
}
