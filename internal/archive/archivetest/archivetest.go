// Package archivetest builds archives for tests without package archive's
// Writer: its own reading of the format (ARCH-001, ARCH-002), so that the
// Reader, and tools that read archives, are checked against something
// other than the code they would otherwise be checked against. It also
// writes what the production Writer never does: legacy archives (every
// record under the base nonce, as libxmtp up to 1.6.1 wrote them) and
// archives under a chosen base nonce.
package archivetest

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"fmt"
	"math/big"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/protobuf/proto"

	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
)

// Record is one record's plaintext and the nonce it is sealed under.
type Record struct {
	Plain []byte
	Nonce [12]byte
}

// Raw writes an archive: the 14-byte header (version, little-endian, then
// the base nonce), then one zstd frame of the records, each a
// little-endian u32 length of its AES-256-GCM output (tag included)
// followed by that output, sealed without associated data.
func Raw(key []byte, version uint16, base [12]byte, records []Record) ([]byte, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	var body []byte
	for _, r := range records {
		sealed := aead.Seal(nil, r.Nonce[:], r.Plain, nil)
		body = binary.LittleEndian.AppendUint32(body, uint32(len(sealed)))
		body = append(body, sealed...)
	}
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		return nil, err
	}
	out := binary.LittleEndian.AppendUint16(nil, version)
	out = append(out, base[:]...)
	return append(out, enc.EncodeAll(body, nil)...), nil
}

// Counter writes elements as the spec's writer does: record i under base
// + i mod 2^96, the nonce read as a little-endian integer.
func Counter(key []byte, base [12]byte, elements ...*ds.BackupElement) ([]byte, error) {
	return sealAll(key, base, elements, func(i int) [12]byte { return NonceAt(base, uint64(i)) })
}

// Legacy writes elements as libxmtp up to 1.6.1 did: every record under
// the base nonce.
func Legacy(key []byte, base [12]byte, elements ...*ds.BackupElement) ([]byte, error) {
	return sealAll(key, base, elements, func(int) [12]byte { return base })
}

func sealAll(key []byte, base [12]byte, elements []*ds.BackupElement, nonce func(int) [12]byte) ([]byte, error) {
	records := make([]Record, len(elements))
	for i, el := range elements {
		plain, err := proto.Marshal(el)
		if err != nil {
			return nil, fmt.Errorf("element %d: %w", i, err)
		}
		records[i] = Record{Plain: plain, Nonce: nonce(i)}
	}
	return Raw(key, 0, base, records)
}

// NonceAt is base + i mod 2^96, computed with math/big.
func NonceAt(base [12]byte, i uint64) [12]byte {
	n := new(big.Int).SetBytes(reversed(base[:]))
	n.Add(n, new(big.Int).SetUint64(i))
	n.Mod(n, new(big.Int).Lsh(big.NewInt(1), 96))
	var be [12]byte
	n.FillBytes(be[:])
	var out [12]byte
	copy(out[:], reversed(be[:]))
	return out
}

func reversed(b []byte) []byte {
	r := make([]byte, len(b))
	for i := range b {
		r[len(b)-1-i] = b[i]
	}
	return r
}
