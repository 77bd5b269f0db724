package server

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"

	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	"github.com/contentbackup/contentbackup/internal/store"
)

// Page tokens are opaque to callers and unforgeable: a kind byte, a
// random nonce, and the keyset cursor of the last record of the previous
// page sealed with AES-256-GCM, the kind and the request it continues
// (owner, group, window) as its associated data. A token replayed
// against another owner, another list or another window, or altered,
// fails to open and is refused; and since the cursor is encrypted, no
// token shows an id (another owner's operation id, say) to whoever holds
// it.

const (
	tokenGroups   byte = 'g'
	tokenMessages byte = 'm'
	tokenConsent  byte = 'c'
)

const (
	tokenNonceSize = 12
	tokenTagSize   = 16
	// maxPageTokenLen bounds what is decoded: a cursor holds at most an id
	// or consent entity (records bound them) and a few fixed fields.
	maxPageTokenLen = 2048
)

// Page size bounds shared by every List call.
const (
	defaultPageSize = 100
	maxPageSize     = 1000
)

var errBadToken = fmt.Errorf("page_token: not a token this list issued for this request")

func pageSize(n int32) (int, error) {
	switch {
	case n < 0:
		return 0, fmt.Errorf("page_size: %d is negative", n)
	case n == 0:
		return defaultPageSize, nil
	case n > maxPageSize:
		return 0, fmt.Errorf("page_size: %d exceeds the limit of %d", n, maxPageSize)
	}
	return int(n), nil
}

// pageTokens issues and opens page tokens under one key.
type pageTokens struct{ aead cipher.AEAD }

// newPageTokens seals with a key derived from key, or with a random key
// when none is given.
func newPageTokens(key []byte) *pageTokens {
	if len(key) == 0 {
		key = make([]byte, 32)
		_, _ = rand.Read(key) // crypto/rand.Read never fails (Go 1.24+)
	}
	// The configured key may be of any length (it was an HMAC key): the
	// cipher's key is derived from it for this one use.
	m := hmac.New(sha256.New, key)
	m.Write([]byte("contentbackup page token v2"))
	block, _ := aes.NewCipher(m.Sum(nil)) // a 32-byte key: never an error
	aead, _ := cipher.NewGCM(block)
	return &pageTokens{aead: aead}
}

// binding is the request a token continues, length-prefixed so that no
// two different requests share one.
func binding(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = binary.AppendUvarint(b, uint64(len(p)))
		b = append(b, p...)
	}
	return b
}

func additional(kind byte, bound []byte) []byte {
	return append([]byte{kind}, bound...)
}

func (t *pageTokens) issue(kind byte, bound, cursor []byte) string {
	b := make([]byte, 1+tokenNonceSize, 1+tokenNonceSize+len(cursor)+tokenTagSize)
	b[0] = kind
	_, _ = rand.Read(b[1 : 1+tokenNonceSize])
	b = t.aead.Seal(b, b[1:1+tokenNonceSize], cursor, additional(kind, bound))
	return base64.RawURLEncoding.EncodeToString(b)
}

// open returns the cursor of a token this server issued for the same kind
// and request.
func (t *pageTokens) open(kind byte, bound []byte, token string) ([]byte, error) {
	if len(token) > maxPageTokenLen {
		return nil, fmt.Errorf("page_token: %d bytes is longer than any token this server issues (%d)", len(token), maxPageTokenLen)
	}
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(b) < 1+tokenNonceSize+tokenTagSize+1 || b[0] != kind {
		return nil, errBadToken
	}
	cursor, err := t.aead.Open(nil, b[1:1+tokenNonceSize], b[1+tokenNonceSize:], additional(kind, bound))
	if err != nil {
		return nil, errBadToken
	}
	return cursor, nil
}

func ownerBinding(owner string) []byte { return binding([]byte(owner)) }

func (t *pageTokens) groups(owner string, lastID []byte) string {
	return t.issue(tokenGroups, ownerBinding(owner), lastID)
}

func (t *pageTokens) parseGroups(owner, token string) ([]byte, error) {
	if token == "" {
		return nil, nil
	}
	return t.open(tokenGroups, ownerBinding(owner), token)
}

func messagesBinding(owner string, q store.MessageQuery) []byte {
	window := func(v *int64) []byte {
		if v == nil {
			return nil
		}
		return binary.BigEndian.AppendUint64([]byte{1}, uint64(*v))
	}
	return binding([]byte(owner), q.GroupID, window(q.StartNs), window(q.EndNs))
}

func (t *pageTokens) messages(owner string, q store.MessageQuery, c store.MessageCursor) string {
	cursor := append(binary.BigEndian.AppendUint64(nil, uint64(c.SentAtNs)), c.ID...)
	return t.issue(tokenMessages, messagesBinding(owner, q), cursor)
}

func (t *pageTokens) parseMessages(owner string, q store.MessageQuery, token string) (*store.MessageCursor, error) {
	if token == "" {
		return nil, nil
	}
	b, err := t.open(tokenMessages, messagesBinding(owner, q), token)
	if err != nil {
		return nil, err
	}
	if len(b) < 9 {
		return nil, errBadToken
	}
	return &store.MessageCursor{SentAtNs: int64(binary.BigEndian.Uint64(b)), ID: b[8:]}, nil
}

func (t *pageTokens) consent(owner string, k store.ConsentKey) string {
	cursor := binary.BigEndian.AppendUint32(nil, uint32(k.EntityType))
	return t.issue(tokenConsent, ownerBinding(owner), append(cursor, k.Entity...))
}

func (t *pageTokens) parseConsent(owner, token string) (*store.ConsentKey, error) {
	if token == "" {
		return nil, nil
	}
	b, err := t.open(tokenConsent, ownerBinding(owner), token)
	if err != nil {
		return nil, err
	}
	if len(b) < 5 {
		return nil, errBadToken
	}
	return &store.ConsentKey{EntityType: cs.ConsentTypeSave(binary.BigEndian.Uint32(b)), Entity: string(b[4:])}, nil
}
