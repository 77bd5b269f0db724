package archive

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"io"
	"testing"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/protobuf/proto"

	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
)

// The container against its ceiling, measured side by side: the raw work
// every archive needs (AES-256-GCM sealing or opening of the same record
// bytes, and one zstd frame of the framed ciphertext: raw blocks written,
// a standard decoder reading them), with no element marshalling, parsing
// or nonce bookkeeping. Records are messages of 1 KiB of content.

// 16,384 records (20 MB): the per-archive setup (the zstd decoder's window
// and buffers) weighs on a real archive about as little as here.
const benchRecords = 16384

func benchElement() *ds.BackupElement {
	return &ds.BackupElement{Element: &ds.BackupElement_GroupMessage{GroupMessage: &mb.GroupMessageSave{
		Id: bytes.Repeat([]byte{1}, 32), GroupId: bytes.Repeat([]byte{2}, 16), DecryptedMessageBytes: bytes.Repeat([]byte("x"), 1024),
		SentAtNs: 1_700_000_000_000_000_000, Kind: mb.GroupMessageKindSave_GROUP_MESSAGE_KIND_SAVE_APPLICATION,
		SenderInstallationId: bytes.Repeat([]byte{3}, 32), SenderInboxId: string(bytes.Repeat([]byte("a"), 64)),
	}}}
}

func recordSize(b *testing.B) int {
	n, err := proto.Marshal(benchElement())
	if err != nil {
		b.Fatal(err)
	}
	return len(n)
}

// BenchmarkRawSealCompress is the writer's ceiling: each record sealed and
// framed into one zstd frame of raw blocks, the least a zstd stream of
// ciphertext can be (see rawFrameWriter).
func BenchmarkRawSealCompress(b *testing.B) {
	plain, _ := proto.Marshal(benchElement())
	block, _ := aes.NewCipher(testKey)
	aead, _ := cipher.NewGCM(block)
	var nonce [NonceSize]byte
	sealed := make([]byte, 0, len(plain)+TagSize+4)
	b.SetBytes(int64(len(plain) * benchRecords))
	for b.Loop() {
		f, _ := newRawFrameWriter(io.Discard)
		for i := range benchRecords {
			binary.LittleEndian.PutUint64(nonce[:], uint64(i))
			sealed = binary.LittleEndian.AppendUint32(sealed[:0], uint32(len(plain)+TagSize))
			sealed = aead.Seal(sealed, nonce[:], plain, nil)
			f.Write(sealed)
		}
		f.Close()
	}
}

// BenchmarkWriter is the container writing the same records, marshalling
// each element from its message.
func BenchmarkWriter(b *testing.B) {
	el := benchElement()
	b.SetBytes(int64(recordSize(b) * benchRecords))
	for b.Loop() {
		w, _ := NewWriter(io.Discard, testKey)
		for range benchRecords {
			if err := w.WriteElement(el); err != nil {
				b.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

func benchArchive(b *testing.B) []byte {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, testKey)
	w.WriteElement(&ds.BackupElement{Element: &ds.BackupElement_Metadata{Metadata: &ds.BackupMetadataSave{}}})
	el := benchElement()
	for range benchRecords {
		w.WriteElement(el)
	}
	w.Close()
	return buf.Bytes()
}

// BenchmarkRawDecompressOpen is the reader's ceiling: one zstd stream
// decoded, each record opened, nothing parsed.
func BenchmarkRawDecompressOpen(b *testing.B) { benchRawOpen(b, false) }

// BenchmarkRawDecompressOpenKept is RawDecompressOpen for a caller that
// keeps every plaintext past its record, as import keeps Next's elements:
// each record opened into memory of its own. It is what keeping costs
// before any parsing, and so the most Next can reach of RawDecompressOpen
// (make bench-container prints both).
func BenchmarkRawDecompressOpenKept(b *testing.B) { benchRawOpen(b, true) }

func benchRawOpen(b *testing.B, keep bool) {
	data := benchArchive(b)
	block, _ := aes.NewCipher(testKey)
	aead, _ := cipher.NewGCM(block)
	base := Nonce(data[2:14])
	b.SetBytes(int64(recordSize(b) * benchRecords))
	ct := make([]byte, 0, 2048)
	plain := make([]byte, 0, 2048)
	for b.Loop() {
		// A decoder per archive, with the Reader's settings, as the
		// writer's ceiling makes an encoder per archive.
		dec, err := zstd.NewReader(bytes.NewReader(data[HeaderSize:]), zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderMaxWindow(DefaultMaxWindow), zstd.WithDecoderLowmem(true))
		if err != nil {
			b.Fatal(err)
		}
		var prefix [4]byte
		for i := uint64(0); ; i++ {
			if _, err := io.ReadFull(dec, prefix[:]); err != nil {
				break
			}
			ct = ct[:binary.LittleEndian.Uint32(prefix[:])]
			if _, err := io.ReadFull(dec, ct); err != nil {
				b.Fatal(err)
			}
			dst := plain[:0]
			if keep {
				dst = nil // Open allocates the plaintext's own memory
			}
			nonce := base.Add(i)
			if plain, err = aead.Open(dst, nonce[:], ct, nil); err != nil {
				b.Fatal(err)
			}
		}
		dec.Close()
	}
}

// BenchmarkReader is the container reading the same archive into
// elements the caller keeps (Next), as import does.
func BenchmarkReader(b *testing.B) { benchReader(b, (*Reader).Next) }

// BenchmarkReaderShared reads elements that live in the Reader's buffers
// until the next call (NextShared), as Verify does.
func BenchmarkReaderShared(b *testing.B) { benchReader(b, (*Reader).NextShared) }

func benchReader(b *testing.B, next func(*Reader) (*ds.BackupElement, error)) {
	data := benchArchive(b)
	b.SetBytes(int64(recordSize(b) * benchRecords))
	for b.Loop() {
		r, err := NewReader(bytes.NewReader(data), testKey, ReaderOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := r.Metadata(); err != nil {
			b.Fatal(err)
		}
		n := 0
		for {
			_, err := next(r)
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			n++
		}
		if n != benchRecords {
			b.Fatalf("%d records", n)
		}
		r.Close()
	}
}

// BenchmarkElementMarshal and BenchmarkElementParse: one 1 KiB message
// element written and read by the hand marshaller and parser, each beside
// its ceiling, protobuf's own (proto.Marshal, proto.Unmarshal), in one
// run: BENCHMARKS.md reports the ratio.
func BenchmarkElementMarshal(b *testing.B) {
	el := benchElement()
	b.Run("hand", func(b *testing.B) {
		buf := make([]byte, 0, 4096)
		b.ReportAllocs()
		for b.Loop() {
			var err error
			if buf, err = appendElement(buf[:0], el); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("proto", func(b *testing.B) {
		buf := make([]byte, 0, 4096)
		b.ReportAllocs()
		for b.Loop() {
			var err error
			if buf, err = (proto.MarshalOptions{Deterministic: true}).MarshalAppend(buf[:0], el); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkElementParse(b *testing.B) {
	data, err := proto.Marshal(benchElement())
	if err != nil {
		b.Fatal(err)
	}
	b.Run("hand", func(b *testing.B) {
		var me handElement
		var strs interner
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := parseElement(data, &me, &strs); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var el ds.BackupElement
			if err := proto.Unmarshal(data, &el); err != nil {
				b.Fatal(err)
			}
		}
	})
}
