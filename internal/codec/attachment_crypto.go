package codec

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
)

// Errors of DecryptAttachment that callers must tell apart.
var (
	// ErrDigestMismatch: the payload is not the object the remote attachment names.
	ErrDigestMismatch = errors.New("content digest mismatch")
	// ErrAuthentication: the payload does not authenticate under the key; no plaintext is returned.
	ErrAuthentication = errors.New("payload failed authentication")
)

// EncryptAttachment encrypts a serialized attachment envelope as CTYPE-015
// requires: a fresh 32-byte secret and salt and a fresh 12-byte nonce from
// random, the key by HKDF-SHA256 with empty info, AES-256-GCM with empty
// associated data. It returns the payload to upload and a remote attachment
// with every parameter but the URL, which the caller sets; contentLength and
// filename are always set, since the Android SDK requires both.
func EncryptAttachment(random io.Reader, a *Attachment) ([]byte, *RemoteAttachment, error) {
	secret := make([]byte, secretSize)
	salt := make([]byte, saltSize)
	nonce := make([]byte, nonceSize)
	for _, b := range [][]byte{secret, salt, nonce} {
		if _, err := io.ReadFull(random, b); err != nil {
			return nil, nil, fmt.Errorf("encrypt attachment: random: %w", err)
		}
	}
	return encryptAttachmentWith(secret, salt, nonce, a)
}

func encryptAttachmentWith(secret, salt, nonce []byte, a *Attachment) ([]byte, *RemoteAttachment, error) {
	ec, err := AttachmentCodec{}.Encode(a)
	if err != nil {
		return nil, nil, withType(err, TypeAttachment)
	}
	// Only the attachment's own members are encrypted: the reference
	// encrypts the envelope without fallback.
	ec.Fallback = nil
	plaintext, err := deterministic.Marshal(ec)
	if err != nil {
		return nil, nil, fmt.Errorf("encrypt attachment: marshal: %w", err)
	}
	payload, err := seal(secret, salt, nonce, plaintext)
	if err != nil {
		return nil, nil, err
	}
	digest := sha256.Sum256(payload)
	if uint64(len(payload)) > 1<<32-1 {
		return nil, nil, encodeError("attachment.data", "encrypted payload of %d bytes exceeds the 4294967295-byte contentLength", len(payload))
	}
	filename := ""
	if a.Filename != nil {
		filename = *a.Filename
	}
	return payload, &RemoteAttachment{
		ContentDigest: hex.EncodeToString(digest[:]),
		Secret:        secret,
		Salt:          salt,
		Nonce:         nonce,
		Scheme:        schemeHTTPS,
		ContentLength: ptr(uint32(len(payload))),
		Filename:      &filename,
	}, nil
}

// DecryptAttachment checks the payload's digest before anything else, then
// opens it and decodes the attachment envelope inside (CTYPE-015).
func DecryptAttachment(payload []byte, ra *RemoteAttachment) (*Attachment, error) {
	if len(ra.Secret) != secretSize || len(ra.Salt) != saltSize || len(ra.Nonce) != nonceSize {
		return nil, decodeError("remote_attachment", "secret and salt must be 32 bytes and nonce 12 bytes")
	}
	sum := sha256.Sum256(payload)
	if hex.EncodeToString(sum[:]) != ra.ContentDigest {
		return nil, fmt.Errorf("%w: payload digest %x, remote attachment names %q", ErrDigestMismatch, sum, Abbrev(ra.ContentDigest))
	}
	key, err := attachmentKey(ra.Secret, ra.Salt)
	if err != nil {
		return nil, err
	}
	gcm, err := newGCM(key)
	if err != nil {
		return nil, err
	}
	plaintext, err := gcm.Open(nil, ra.Nonce, payload, nil)
	if err != nil {
		return nil, ErrAuthentication
	}
	ec, err := ParseEnvelope(plaintext)
	if err != nil {
		return nil, decodeError("payload", "decrypted payload is not an attachment envelope: %v", err)
	}
	if TypeIDOf(ec.GetType()).Key() != TypeAttachment.Key() {
		return nil, decodeError("payload", "decrypted envelope is %s, not an attachment", TypeIDOf(ec.GetType()))
	}
	v, err := AttachmentCodec{}.Decode(ec, nil)
	if err != nil {
		return nil, err
	}
	return v.(*Attachment), nil
}

func seal(secret, salt, nonce, plaintext []byte) ([]byte, error) {
	key, err := attachmentKey(secret, salt)
	if err != nil {
		return nil, err
	}
	gcm, err := newGCM(key)
	if err != nil {
		return nil, err
	}
	return gcm.Seal(nil, nonce, plaintext, nil), nil
}

func attachmentKey(secret, salt []byte) ([]byte, error) {
	key, err := hkdf.Key(sha256.New, secret, salt, "", 32)
	if err != nil {
		return nil, fmt.Errorf("attachment key: %w", err)
	}
	return key, nil
}

func newGCM(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("attachment cipher: %w", err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("attachment cipher: %w", err)
	}
	return gcm, nil
}
