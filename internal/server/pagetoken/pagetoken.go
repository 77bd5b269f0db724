// Package pagetoken seals the page tokens every List call of the API
// hands out and takes back: opaque to callers, unforgeable, and bound to
// the principal and the request they continue.
//
// A token is a kind byte, a random nonce, and the keyset cursor of the
// last record of the previous page sealed with AES-256-GCM; the kind, the
// principal it was issued to and the request it continues (owner, group,
// window, filter) are its associated data. A token replayed by another
// principal, against another owner, list or window, or altered, fails to
// open and is refused; and since the cursor is encrypted, no token shows
// an id (another owner's operation id, say) to whoever holds it.
package pagetoken

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/contentbackup/contentbackup/internal/records"

	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	"github.com/contentbackup/contentbackup/internal/store"
)

// Kind names the list a token continues.
type Kind byte

// The lists.
const (
	Groups     Kind = 'g'
	Messages   Kind = 'm'
	Consent    Kind = 'c'
	Operations Kind = 'o'
	Backups    Kind = 'b'
)

const (
	nonceSize = 12
	tagSize   = 16
	// MaxLen bounds what is decoded: a cursor holds at most an id or a
	// consent entity (records bound them) and a few fixed fields.
	MaxLen = 2048
)

// Page size bounds shared by every List call.
const (
	DefaultSize = 100
	MaxSize     = 1000
)

// ErrBad: the token is not one this list issued for this request and
// principal.
var ErrBad = errors.New("page_token: not a token this list issued for this request")

// Size is a request's page size: its default for 0, an error naming the
// field when negative or over MaxSize.
func Size(n int32) (int, error) {
	switch {
	case n < 0:
		return 0, &records.FieldError{Field: "page_size", Reason: fmt.Sprintf("%d is negative", n)}
	case n == 0:
		return DefaultSize, nil
	case n > MaxSize:
		return 0, &records.FieldError{Field: "page_size", Reason: fmt.Sprintf("%d exceeds the limit of %d", n, MaxSize)}
	}
	return int(n), nil
}

// Sealer issues and opens page tokens under one key.
type Sealer struct{ aead cipher.AEAD }

// New seals with a key derived from key (replicas behind one address need
// the same), or with a random key when none is given: tokens then die
// with the process.
func New(key []byte) *Sealer {
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
	return &Sealer{aead: aead}
}

// Binding is the request a token continues, its parts length-prefixed so
// that no two different requests share one.
func Binding(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = binary.AppendUvarint(b, uint64(len(p)))
		b = append(b, p...)
	}
	return b
}

func additional(kind Kind, principal string, bound []byte) []byte {
	return append([]byte{byte(kind)}, Binding([]byte(principal), bound)...)
}

// Seal is the token of cursor, for principal continuing the request
// bound.
func (s *Sealer) Seal(principal string, kind Kind, bound, cursor []byte) string {
	b := make([]byte, 1+nonceSize, 1+nonceSize+len(cursor)+tagSize)
	b[0] = byte(kind)
	_, _ = rand.Read(b[1 : 1+nonceSize])
	b = s.aead.Seal(b, b[1:1+nonceSize], cursor, additional(kind, principal, bound))
	return base64.RawURLEncoding.EncodeToString(b)
}

// Open returns the cursor of a token this server issued to principal for
// the same kind and request; anything else is ErrBad.
func (s *Sealer) Open(principal string, kind Kind, bound []byte, token string) ([]byte, error) {
	if len(token) > MaxLen {
		return nil, fmt.Errorf("page_token: %d bytes is longer than any token this server issues (%d)", len(token), MaxLen)
	}
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(b) < 1+nonceSize+tagSize+1 || b[0] != byte(kind) {
		return nil, ErrBad
	}
	cursor, err := s.aead.Open(nil, b[1:1+nonceSize], b[1+nonceSize:], additional(kind, principal, bound))
	if err != nil {
		return nil, ErrBad
	}
	return cursor, nil
}

// OwnerBinding is a list of one owner's records.
func OwnerBinding(owner string) []byte { return Binding([]byte(owner)) }

// GroupsToken continues owner's groups after lastID.
func (s *Sealer) GroupsToken(principal, owner string, lastID []byte) string {
	return s.Seal(principal, Groups, OwnerBinding(owner), lastID)
}

// OpenGroups is the cursor of a groups token ("" is the first page: nil).
func (s *Sealer) OpenGroups(principal, owner, token string) ([]byte, error) {
	if token == "" {
		return nil, nil
	}
	return s.Open(principal, Groups, OwnerBinding(owner), token)
}

func messagesBinding(owner string, q store.MessageQuery) []byte {
	window := func(v *int64) []byte {
		if v == nil {
			return nil
		}
		return binary.BigEndian.AppendUint64([]byte{1}, uint64(*v))
	}
	return Binding([]byte(owner), q.GroupID, window(q.StartNs), window(q.EndNs))
}

// MessagesToken continues q's messages of owner after c.
func (s *Sealer) MessagesToken(principal, owner string, q store.MessageQuery, c store.MessageCursor) string {
	cursor := append(binary.BigEndian.AppendUint64(nil, uint64(c.SentAtNs)), c.ID...)
	return s.Seal(principal, Messages, messagesBinding(owner, q), cursor)
}

// OpenMessages is the cursor of a messages token (nil for "").
func (s *Sealer) OpenMessages(principal, owner string, q store.MessageQuery, token string) (*store.MessageCursor, error) {
	if token == "" {
		return nil, nil
	}
	b, err := s.Open(principal, Messages, messagesBinding(owner, q), token)
	if err != nil {
		return nil, err
	}
	if len(b) < 9 {
		return nil, ErrBad
	}
	return &store.MessageCursor{SentAtNs: int64(binary.BigEndian.Uint64(b)), ID: b[8:]}, nil
}

// ConsentToken continues owner's consent after k.
func (s *Sealer) ConsentToken(principal, owner string, k store.ConsentKey) string {
	cursor := binary.BigEndian.AppendUint32(nil, uint32(k.EntityType))
	return s.Seal(principal, Consent, OwnerBinding(owner), append(cursor, k.Entity...))
}

// OpenConsent is the cursor of a consent token (nil for "").
func (s *Sealer) OpenConsent(principal, owner, token string) (*store.ConsentKey, error) {
	if token == "" {
		return nil, nil
	}
	b, err := s.Open(principal, Consent, OwnerBinding(owner), token)
	if err != nil {
		return nil, err
	}
	if len(b) < 5 {
		return nil, ErrBad
	}
	return &store.ConsentKey{EntityType: cs.ConsentTypeSave(binary.BigEndian.Uint32(b)), Entity: string(b[4:])}, nil
}
