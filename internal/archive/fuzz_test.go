package archive

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"google.golang.org/protobuf/proto"

	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
)

// FuzzReader reads arbitrary bytes as an archive under the test key: it
// must end, with io.EOF or an error, never panic, and whatever it reads as
// complete must write and read back the same.
func FuzzReader(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1, 0})
	f.Add(write(f, &testNonce, sampleElements()...))
	f.Add(legacyArchive(f, sampleElements()...))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkReads(t, data)
	})
}

// FuzzReaderMutatedArchive starts from valid archives, counter and legacy,
// so that mutations reach past the header and the first record.
func FuzzReaderMutatedArchive(f *testing.F) {
	f.Add(write(f, &testNonce, sampleElements()...), uint16(0), byte(0))
	f.Add(legacyArchive(f, sampleElements()...), uint16(0), byte(0))
	f.Fuzz(func(t *testing.T, data []byte, at uint16, flip byte) {
		if len(data) > 0 {
			data = bytes.Clone(data)
			data[int(at)%len(data)] ^= flip
		}
		checkReads(t, data)
	})
}

func checkReads(t *testing.T, data []byte) {
	meta, els, _, err := readAll(data, testKey)
	if err != nil {
		if errors.Is(err, io.EOF) {
			t.Fatalf("io.EOF as an error: %v", err)
		}
		return
	}
	if meta == nil {
		t.Fatal("complete archive without metadata")
	}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testKey)
	if err != nil {
		t.Fatal(err)
	}
	all := append([]*ds.BackupElement{{Element: &ds.BackupElement_Metadata{Metadata: meta}}}, els...)
	for _, el := range all {
		if err := w.WriteElement(el); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	meta2, els2, _, err := readAll(buf.Bytes(), testKey)
	if err != nil || !proto.Equal(meta, meta2) || len(els) != len(els2) {
		t.Fatalf("rewritten archive reads differently: %v", err)
	}
	for i := range els {
		if !proto.Equal(els[i], els2[i]) {
			t.Fatalf("element %d differs after rewriting", i)
		}
	}
}
