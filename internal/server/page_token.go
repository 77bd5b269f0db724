package server

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"

	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	"github.com/contentbackup/contentbackup/internal/store"
)

// Page tokens are opaque to callers: a kind byte, then the keyset cursor
// of the last record of the previous page, base64url-encoded. The kind
// byte stops a token of one list being replayed against another.

const (
	tokenGroups   byte = 'g'
	tokenMessages byte = 'm'
	tokenConsent  byte = 'c'
)

// Page size bounds shared by every List call.
const (
	defaultPageSize = 100
	maxPageSize     = 1000
)

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

func encodeToken(kind byte, parts ...[]byte) string {
	b := []byte{kind}
	for _, p := range parts {
		b = append(b, p...)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeToken(kind byte, token string) ([]byte, error) {
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(b) < 2 || b[0] != kind {
		return nil, fmt.Errorf("page_token: not a token this list issued")
	}
	return b[1:], nil
}

func groupsToken(lastID []byte) string { return encodeToken(tokenGroups, lastID) }

func parseGroupsToken(token string) ([]byte, error) {
	if token == "" {
		return nil, nil
	}
	return decodeToken(tokenGroups, token)
}

func messagesToken(c store.MessageCursor) string {
	return encodeToken(tokenMessages, binary.BigEndian.AppendUint64(nil, uint64(c.SentAtNs)), c.ID)
}

func parseMessagesToken(token string) (*store.MessageCursor, error) {
	if token == "" {
		return nil, nil
	}
	b, err := decodeToken(tokenMessages, token)
	if err != nil {
		return nil, err
	}
	if len(b) < 9 {
		return nil, fmt.Errorf("page_token: not a token this list issued")
	}
	return &store.MessageCursor{SentAtNs: int64(binary.BigEndian.Uint64(b)), ID: b[8:]}, nil
}

func consentToken(k store.ConsentKey) string {
	return encodeToken(tokenConsent, binary.BigEndian.AppendUint32(nil, uint32(k.EntityType)), []byte(k.Entity))
}

func parseConsentToken(token string) (*store.ConsentKey, error) {
	if token == "" {
		return nil, nil
	}
	b, err := decodeToken(tokenConsent, token)
	if err != nil {
		return nil, err
	}
	if len(b) < 5 {
		return nil, fmt.Errorf("page_token: not a token this list issued")
	}
	return &store.ConsentKey{EntityType: cs.ConsentTypeSave(binary.BigEndian.Uint32(b)), Entity: string(b[4:])}, nil
}
