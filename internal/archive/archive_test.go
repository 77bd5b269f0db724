package archive

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/archive/archivetest"
)

var (
	testKey   = bytes.Repeat([]byte{0x01}, KeySize)
	testNonce = Nonce{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}
)

func metadataElement() *ds.BackupElement {
	return &ds.BackupElement{Element: &ds.BackupElement_Metadata{Metadata: &ds.BackupMetadataSave{
		Elements:     []ds.BackupElementSelection{ds.BackupElementSelection_BACKUP_ELEMENT_SELECTION_MESSAGES, ds.BackupElementSelection_BACKUP_ELEMENT_SELECTION_CONSENT},
		ExportedAtNs: 1_700_000_000_000_000_000,
	}}}
}

func groupElement(id string) *ds.BackupElement {
	return &ds.BackupElement{Element: &ds.BackupElement_Group{Group: &gb.GroupSave{
		Id: []byte(id), MembershipState: gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_ALLOWED,
		ConversationType: gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_GROUP,
	}}}
}

func messageElement(id, group string) *ds.BackupElement {
	return &ds.BackupElement{Element: &ds.BackupElement_GroupMessage{GroupMessage: &mb.GroupMessageSave{
		Id: []byte(id), GroupId: []byte(group), DecryptedMessageBytes: []byte("content of " + id), SentAtNs: 7,
	}}}
}

func consentElement() *ds.BackupElement {
	return &ds.BackupElement{Element: &ds.BackupElement_Consent{Consent: &cs.ConsentSave{
		EntityType: cs.ConsentTypeSave_CONSENT_TYPE_SAVE_INBOX_ID, State: cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED, Entity: "inbox", ConsentedAtNs: 1,
	}}}
}

func sampleElements() []*ds.BackupElement {
	return []*ds.BackupElement{metadataElement(), groupElement("g1"), messageElement("m1", "g1"), messageElement("m2", "g1"), consentElement()}
}

// write writes elements with the package's Writer.
// write writes els with the package's Writer, under base when it is not
// nil.
func write(t testing.TB, base *Nonce, els ...*ds.BackupElement) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testKey)
	if base != nil {
		buf.Reset()
		w, err = newWriter(&buf, testKey, *base)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, el := range els {
		if err := w.WriteElement(el); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// readAll reads an archive to its end: the metadata, then every element.
func readAll(data []byte, key []byte) (*ds.BackupMetadataSave, []*ds.BackupElement, *Reader, error) {
	r, err := NewReader(bytes.NewReader(data), key, ReaderOptions{})
	if err != nil {
		return nil, nil, nil, err
	}
	defer r.Close()
	meta, err := r.Metadata()
	if err != nil {
		return nil, nil, r, err
	}
	var els []*ds.BackupElement
	for {
		el, err := r.Next()
		if errors.Is(err, io.EOF) {
			return meta, els, r, nil
		}
		if err != nil {
			return meta, els, r, err
		}
		els = append(els, el)
	}
}

// rawRecord is a record sealed by the test itself, under any nonce.
type rawRecord struct {
	plain []byte
	nonce Nonce
}

// rawArchive builds an archive without the package's Writer: the test's
// own reading of section 1, so that the Reader is checked against it.
func rawArchive(t testing.TB, version uint16, base Nonce, records []rawRecord) []byte {
	t.Helper()
	raw := make([]archivetest.Record, len(records))
	for i, r := range records {
		raw[i] = archivetest.Record{Plain: r.plain, Nonce: r.nonce}
	}
	data, err := archivetest.Raw(testKey, version, base, raw)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// legacyArchive is els under testNonce, every record under it, as
// libxmtp up to 1.6.1 wrote (the Writer writes only counter archives).
func legacyArchive(t testing.TB, els ...*ds.BackupElement) []byte {
	t.Helper()
	data, err := archivetest.Legacy(testKey, testNonce, els...)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func marshalEl(t testing.TB, el *ds.BackupElement) []byte {
	b, err := proto.Marshal(el)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// bigNonce is base + i mod 2^96 computed with math/big, independently of
// Nonce.Add.
func bigNonce(base Nonce, i uint64) Nonce { return archivetest.NonceAt(base, i) }

func TestARCH001_LayoutReadIndependently(t *testing.T) {
	els := sampleElements()
	checkLayout(t, write(t, &testNonce, els...), els)
}

// checkLayout reads data as section 1 lays an archive out, without the
// Reader: version 0 and testNonce in the header, one zstd frame (decoded
// by klauspost's decoder) of length-prefixed AES-256-GCM records, record i
// under testNonce + i (math/big), each the marshalled element.
func checkLayout(t *testing.T, data []byte, els []*ds.BackupElement) {
	t.Helper()
	if v := binary.LittleEndian.Uint16(data[:2]); v != 0 {
		t.Fatalf("version %d; want 0", v)
	}
	if !bytes.Equal(data[2:14], testNonce[:]) {
		t.Fatalf("base nonce %x; want %x", data[2:14], testNonce[:])
	}
	body := data[HeaderSize:]
	magic := []byte{0x28, 0xb5, 0x2f, 0xfd}
	if !bytes.HasPrefix(body, magic) || bytes.Count(body, magic) != 1 {
		t.Fatalf("the body is not exactly one zstd frame")
	}
	var h zstd.Header
	if err := h.Decode(body); err != nil || h.HasCheckSum || h.HasFCS {
		t.Errorf("frame header %+v, %v; want no checksum and no content size, as the reference writes", h, err)
	}
	dec, _ := zstd.NewReader(nil)
	plain, err := dec.DecodeAll(body, nil)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := aes.NewCipher(testKey)
	aead, _ := cipher.NewGCM(block)
	for i, el := range els {
		if len(plain) < 4 {
			t.Fatalf("record %d: stream ends", i)
		}
		n := binary.LittleEndian.Uint32(plain)
		ct := plain[4 : 4+n]
		plain = plain[4+n:]
		nonce := bigNonce(testNonce, uint64(i))
		got, err := aead.Open(nil, nonce[:], ct, nil)
		if err != nil {
			t.Fatalf("record %d does not open under base + %d: %v", i, i, err)
		}
		if int(n) != len(got)+TagSize {
			t.Errorf("record %d: length %d; want plaintext + 16", i, n)
		}
		if !bytes.Equal(got, marshalEl(t, el)) {
			t.Errorf("record %d: plaintext is not the element", i)
		}
	}
	if len(plain) != 0 {
		t.Errorf("%d bytes after the last record", len(plain))
	}
}

// The exact bytes of a fixed archive: any change to the container's
// output shows here. The vector is the writer's output pinned, so it is
// first held to the layout read independently (checkLayout): a vector
// re-pinned to a wrong writer fails there, not only here.
func TestARCH001_GoldenVector(t *testing.T) {
	golden, _ := hex.DecodeString(goldenArchive)
	checkLayout(t, golden, []*ds.BackupElement{metadataElement(), groupElement("g1")})
	data := write(t, &testNonce, metadataElement(), groupElement("g1"))
	const want = goldenArchive
	if got := hex.EncodeToString(data); got != want {
		t.Errorf("archive bytes changed:\n got %s\nwant %s", got, want)
	}
	meta, els, _, err := readAll(data, testKey)
	if err != nil || !proto.Equal(meta, metadataElement().GetMetadata()) || len(els) != 1 || !proto.Equal(els[0], groupElement("g1")) {
		t.Errorf("read back: %v %v %v", meta, els, err)
	}
}

func TestRoundTrip(t *testing.T) {
	els := sampleElements()
	meta, got, r, err := readAll(write(t, nil, els...), testKey)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(meta, els[0].GetMetadata()) {
		t.Errorf("metadata %v", meta)
	}
	if len(got) != len(els)-1 {
		t.Fatalf("%d elements; want %d", len(got), len(els)-1)
	}
	for i := range got {
		if !proto.Equal(got[i], els[i+1]) {
			t.Errorf("element %d: %v", i+1, got[i])
		}
	}
	if st := r.Stats(); st.Records != uint64(len(els)) || st.Legacy != 0 || st.Skipped != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestARCH001_RandomBaseNonce(t *testing.T) {
	a := write(t, nil, metadataElement())
	b := write(t, nil, metadataElement())
	if bytes.Equal(a[2:14], b[2:14]) {
		t.Error("two archives share a base nonce")
	}
}

func TestARCH001_NonceCarryAndWrap(t *testing.T) {
	tests := []struct {
		base Nonce
		add  uint64
		want Nonce
	}{
		{Nonce{0xff}, 1, Nonce{0, 1}},
		{Nonce{0xff, 0xff, 0xff}, 1, Nonce{0, 0, 0, 1}},
		{Nonce{0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 3, Nonce{1, 0, 0, 0, 0, 0, 0, 0, 1}},
		{Nonce{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 1, Nonce{}},
		{Nonce{0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 3, Nonce{1}},
		{Nonce{1, 2, 3}, 0, Nonce{1, 2, 3}},
		{Nonce{}, 1 << 63, Nonce{0, 0, 0, 0, 0, 0, 0, 0x80}},
	}
	for _, tc := range tests {
		if got := tc.base.Add(tc.add); got != tc.want {
			t.Errorf("%x + %d = %x; want %x", tc.base, tc.add, got, tc.want)
		}
	}
	if got := (Nonce{}).Sub1(); got != (Nonce{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}) {
		t.Errorf("0 - 1 = %x; want 2^96 - 1", got)
	}
	if got := (Nonce{0, 0, 1}).Sub1(); got != (Nonce{0xff, 0xff}) {
		t.Errorf("borrow: %x", got)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		var n Nonce
		for i := range n {
			n[i] = byte(rng.UintN(256))
		}
		k := rng.Uint64()
		if got, want := n.Add(k), bigNonce(n, k); got != want {
			t.Fatalf("%x + %d = %x; want %x", n, k, got, want)
		}
	}
}

// Records past the nonce space's end wrap to 0 (mod 2^96), in the writer
// and the reader alike.
func TestARCH001_RecordNoncesWrapAt2To96(t *testing.T) {
	base := Nonce{0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	els := []*ds.BackupElement{metadataElement(), groupElement("a"), groupElement("b"), groupElement("c")}
	data := write(t, &base, els...)
	want := rawArchive(t, 0, base, []rawRecord{
		{marshalEl(t, els[0]), base}, {marshalEl(t, els[1]), Nonce{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		{marshalEl(t, els[2]), Nonce{}}, {marshalEl(t, els[3]), Nonce{1}},
	})
	_, got, r, err := readAll(want, testKey)
	if err != nil || len(got) != 3 || r.Stats().Legacy != 0 {
		t.Fatalf("reading the wrapped archive: %d elements, %+v, %v", len(got), r.Stats(), err)
	}
	if _, got, _, err := readAll(data, testKey); err != nil || len(got) != 3 {
		t.Fatalf("reading the writer's wrapped archive: %v", err)
	}
}

func TestARCH002_LegacyArchive(t *testing.T) {
	els := sampleElements()
	data := legacyArchive(t, els...)
	_, got, r, err := readAll(data, testKey)
	if err != nil || len(got) != len(els)-1 {
		t.Fatalf("legacy archive: %d elements, %v", len(got), err)
	}
	// Record 0's counter nonce is the base itself; each later one opens
	// only under the retry.
	if st := r.Stats(); st.Legacy != uint64(len(els)-1) || st.Record0Legacy {
		t.Errorf("stats %+v; want %d legacy records", st, len(els)-1)
	}
}

func TestARCH002_CounterThenLegacy(t *testing.T) {
	b := testNonce
	p := func(el *ds.BackupElement) []byte { return marshalEl(t, el) }
	// Records 0-2 under the counter; then a writer that repeats its nonce:
	// each retry succeeds under b+2, and the counter resumes from it.
	data := rawArchive(t, 0, b, []rawRecord{
		{p(metadataElement()), b}, {p(groupElement("a")), b.Add(1)}, {p(groupElement("b")), b.Add(2)},
		{p(groupElement("c")), b.Add(2)}, {p(groupElement("d")), b.Add(2)},
		// and back to counting from there
		{p(groupElement("e")), b.Add(3)},
	})
	_, got, r, err := readAll(data, testKey)
	if err != nil || len(got) != 5 {
		t.Fatalf("mixed archive: %d elements, %v", len(got), err)
	}
	if st := r.Stats(); st.Legacy != 2 {
		t.Errorf("stats %+v; want 2 legacy records", st)
	}
}

func TestARCH002_FailsWhenRetryFails(t *testing.T) {
	b := testNonce
	data := rawArchive(t, 0, b, []rawRecord{
		{marshalEl(t, metadataElement()), b}, {marshalEl(t, groupElement("a")), b.Add(1)},
		{marshalEl(t, groupElement("b")), b.Add(5)}, // neither b+2 nor b+1
	})
	_, got, _, err := readAll(data, testKey)
	var re *RecordError
	if !errors.Is(err, ErrAuthentication) || !errors.As(err, &re) || re.Record != 2 || len(got) != 1 {
		t.Fatalf("got %d elements, %v; want ErrAuthentication at record 2 after 1 element", len(got), err)
	}
	// A wrong key fails at record 0, before anything is returned.
	other := bytes.Repeat([]byte{2}, KeySize)
	if _, _, _, err := readAll(data, other); !errors.Is(err, ErrAuthentication) || !errors.As(err, &re) || re.Record != 0 {
		t.Errorf("wrong key: %v", err)
	}
}

// failAfter is a reader that fails the test if read past limit bytes.
type failAfter struct {
	t     *testing.T
	r     io.Reader
	limit int
	read  int
}

func (f *failAfter) Read(p []byte) (int, error) {
	if f.read+len(p) > f.limit {
		p = p[:max(0, f.limit-f.read)]
		if len(p) == 0 {
			f.t.Errorf("read past byte %d", f.limit)
			return 0, errors.New("read past the limit")
		}
	}
	n, err := f.r.Read(p)
	f.read += n
	return n, err
}

func TestARCH003_LaterVersionRejectedBeforeAnyRecord(t *testing.T) {
	for _, v := range []uint16{1, 2, 0xffff} {
		data := rawArchive(t, v, testNonce, []rawRecord{{marshalEl(t, metadataElement()), testNonce}})
		_, err := NewReader(&failAfter{t: t, r: bytes.NewReader(data), limit: HeaderSize}, testKey, ReaderOptions{})
		var ve *VersionError
		if !errors.As(err, &ve) || ve.Version != v {
			t.Errorf("version %d: %v; want a VersionError naming it", v, err)
		}
	}
}

func TestARCH005_UnknownElementsSkipped(t *testing.T) {
	unknown := protowire.AppendTag(nil, 9, protowire.BytesType)
	unknown = protowire.AppendBytes(unknown, []byte("from a later client"))
	b := testNonce
	data := rawArchive(t, 0, b, []rawRecord{
		{marshalEl(t, metadataElement()), b},
		{nil, b.Add(1)}, // unset
		//lint:ignore SA1019 the deprecated event element is what ARCH-005 skips
		{marshalEl(t, &ds.BackupElement{Element: &ds.BackupElement_Event{Event: nil}}), b.Add(2)},
		{marshalEl(t, groupElement("a")), b.Add(3)},
		{unknown, b.Add(4)},
		{marshalEl(t, consentElement()), b.Add(5)},
	})
	_, got, r, err := readAll(data, testKey)
	if err != nil || len(got) != 2 || got[0].GetGroup() == nil || got[1].GetConsent() == nil {
		t.Fatalf("got %v, %v; want the group and the consent", got, err)
	}
	if st := r.Stats(); st.Skipped != 3 || st.Records != 6 {
		t.Errorf("stats %+v; want 3 skipped of 6", st)
	}
}

func TestARCH006_Record0MustBeMetadata(t *testing.T) {
	data := write(t, nil, groupElement("a"), metadataElement())
	r, err := NewReader(bytes.NewReader(data), testKey, ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Metadata(); !errors.Is(err, ErrNotMetadata) {
		t.Errorf("Metadata: %v; want ErrNotMetadata", err)
	}
	if el, err := r.Next(); el != nil || !errors.Is(err, ErrNotMetadata) {
		t.Errorf("Next after a bad record 0: %v, %v; nothing may be applied", el, err)
	}
}

func TestARCH012_KeyLength(t *testing.T) {
	for _, n := range []int{0, 1, 16, 31, 33, 64} {
		var out bytes.Buffer
		if _, err := NewWriter(&out, make([]byte, n)); !errors.Is(err, ErrKeySize) || out.Len() != 0 {
			t.Errorf("writer, %d-byte key: %v, wrote %d bytes", n, err, out.Len())
		}
		src := &failAfter{t: t, r: bytes.NewReader(write(t, nil, metadataElement())), limit: 0}
		if _, err := NewReader(src, make([]byte, n), ReaderOptions{}); !errors.Is(err, ErrKeySize) {
			t.Errorf("reader, %d-byte key: %v", n, err)
		}
	}
}

// readWithin reads an archive to its end in a goroutine, failing the test
// if that takes longer than a generous bound: a hang is a failure.
func readWithin(t *testing.T, data []byte) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, _, _, err := readAll(data, testKey)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the reader hangs")
		return nil
	}
}

func TestARCH018_EveryTruncationFails(t *testing.T) {
	data := write(t, &testNonce, sampleElements()...)
	if err := readWithin(t, data); err != nil {
		t.Fatalf("whole archive: %v", err)
	}
	for cut := range len(data) {
		err := readWithin(t, data[:cut])
		if err == nil {
			t.Errorf("cut at %d of %d bytes: read as complete", cut, len(data))
		}
	}
}

func TestARCH018_FramingErrors(t *testing.T) {
	b := testNonce
	frame := func(body []byte) []byte {
		enc, _ := zstd.NewWriter(nil)
		return append(append(binary.LittleEndian.AppendUint16(nil, 0), b[:]...), enc.EncodeAll(body, nil)...)
	}
	valid := write(t, &b, metadataElement(), groupElement("a"))
	tests := []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, ErrTruncated},
		{"half a header", valid[:7], ErrTruncated},
		{"header only", valid[:HeaderSize], ErrTruncated},
		{"empty zstd stream", frame(nil), ErrTruncated},
		{"length under the tag", frame(binary.LittleEndian.AppendUint32(nil, 15)), ErrRecordSize},
		{"length over the limit", frame(binary.LittleEndian.AppendUint32(nil, 1<<31)), ErrRecordSize},
		{"length prefix cut", frame([]byte{20, 0}), ErrTruncated},
		{"ciphertext cut", frame(append(binary.LittleEndian.AppendUint32(nil, 40), make([]byte, 20)...)), ErrTruncated},
		{"not zstd", append(append([]byte{}, valid[:HeaderSize]...), []byte("definitely not a zstd frame")...), ErrCompression},
		{"garbage after the frame", append(append([]byte{}, valid...), 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4), ErrCompression},
	}
	for _, tc := range tests {
		if err := readWithin(t, tc.data); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v; want %v", tc.name, err, tc.want)
		}
	}
}

// A hostile length on a short stream costs what the stream holds, not the
// length it claims.
func TestHostileLengthAllocatesLittle(t *testing.T) {
	enc, _ := zstd.NewWriter(nil)
	body := binary.LittleEndian.AppendUint32(nil, DefaultMaxRecordSize)
	data := append(append(binary.LittleEndian.AppendUint16(nil, 0), testNonce[:]...), enc.EncodeAll(append(body, make([]byte, 100)...), nil)...)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	err := readWithin(t, data)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrTruncated) {
		t.Errorf("%v; want ErrTruncated", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 8<<20 {
		t.Errorf("reading a 100-byte record claiming %d bytes allocated %d bytes", DefaultMaxRecordSize, grew)
	}
}

func TestWriterAfterClose(t *testing.T) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, testKey)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := w.WriteElement(metadataElement()); err == nil {
		t.Error("WriteElement after Close succeeded")
	}
}

// failingSource yields its bytes, then err.
type failingSource struct {
	data []byte
	err  error
}

func (f *failingSource) Read(p []byte) (int, error) {
	if len(f.data) == 0 {
		return 0, f.err
	}
	n := copy(p, f.data)
	f.data = f.data[n:]
	return n, nil
}

// TestReaderKeepsTheSourceError: a source that fails mid-archive (a
// cancelled call, a broken connection) is reported as itself, not as an
// invalid zstd stream or a truncation.
func TestARCH018_ReaderKeepsTheSourceError(t *testing.T) {
	els := []*ds.BackupElement{metadataElement()}
	for i := range 200 {
		els = append(els, &ds.BackupElement{Element: &ds.BackupElement_Group{Group: &gb.GroupSave{Id: bytes.Repeat([]byte{byte(i)}, 200)}}})
	}
	data := write(t, nil, els...)
	cancelled := errors.New("rpc error: code = Canceled")
	r, err := NewReader(&failingSource{data: data[:len(data)/2], err: cancelled}, testKey, ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, err = r.Metadata()
	for err == nil {
		_, err = r.Next()
	}
	if !errors.Is(err, ErrSource) || !errors.Is(err, cancelled) || errors.Is(err, ErrCompression) || errors.Is(err, ErrTruncated) {
		t.Errorf("a failing source read as %v", err)
	}
}

// TestReaderReportsACutCompressedStream: an archive cut inside its zstd
// stream, past the last complete record, is a truncation that says so
// (ARCH-018), not a cut length prefix.
func TestARCH018_ReaderReportsACutCompressedStream(t *testing.T) {
	whole := write(t, nil, metadataElement())
	// Drop the frame's last bytes: the one record decodes only if the
	// block is whole, so the cut is inside the block or at the frame end.
	for cut := len(whole) - 1; cut > len(whole)-4; cut-- {
		r, err := NewReader(bytes.NewReader(whole[:cut]), testKey, ReaderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.Metadata()
		for err == nil {
			_, err = r.Next()
		}
		r.Close()
		if !errors.Is(err, ErrTruncated) || strings.Contains(err.Error(), "length prefix (0 of") || !strings.Contains(err.Error(), "before its first record is whole") {
			t.Errorf("cut at %d of %d: %v; want a truncation before the first record is whole", cut, len(whole), err)
		}
	}
}

// TestRecordNotUTF8NamesTheField (issue 34): a record whose string field
// is not UTF-8 is refused naming the field, as the reference's own error
// does, not only "not a BackupElement".
func TestRecordNotUTF8NamesTheField(t *testing.T) {
	var base Nonce
	base[0] = 9
	meta := marshalEl(t, &ds.BackupElement{Element: &ds.BackupElement_Metadata{Metadata: &ds.BackupMetadataSave{ExportedAtNs: 1}}})
	msg := protowire.AppendTag(nil, 1, protowire.BytesType)
	msg = protowire.AppendBytes(msg, []byte("id"))
	msg = protowire.AppendTag(msg, 7, protowire.BytesType) // sender_inbox_id
	msg = protowire.AppendBytes(msg, []byte("a\xffb"))
	el := protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), msg) // group_message
	data := rawArchive(t, 0, base, []rawRecord{{meta, bigNonce(base, 0)}, {el, bigNonce(base, 1)}})
	_, _, _, err := readAll(data, testKey)
	if !errors.Is(err, ErrElement) || !strings.Contains(err.Error(), "group_message.sender_inbox_id: not valid UTF-8") {
		t.Errorf("a record that is not UTF-8: %v; want ErrElement naming group_message.sender_inbox_id", err)
	}
}

// recordingMeter records every charge and refuses past limit (0: never).
type recordingMeter struct {
	charges []int64
	total   int64
	limit   int64
}

var errMeterFull = errors.New("the test meter is full")

func (m *recordingMeter) Charge(n int64) error {
	if m.limit > 0 && m.total+n > m.limit {
		return errMeterFull
	}
	m.charges = append(m.charges, n)
	m.total += n
	return nil
}

// TestReaderChargesItsMeter: the reader charges its meter, before it
// allocates, its overhead and then both record buffers (ciphertext and
// plaintext) as they grow to the largest record, never more than
// ReaderMemory; a meter that refuses fails the read with its own error.
func TestReaderChargesItsMeter(t *testing.T) {
	big := groupElement("big")
	big.GetGroup().MutableMetadata = &gb.MutableMetadataSave{Attributes: map[string]string{"x": strings.Repeat("y", 3<<20)}}
	data := write(t, nil, metadataElement(), big, groupElement("small"))
	opts := ReaderOptions{MaxRecordSize: 8 << 20, MaxWindow: DefaultMaxWindow}
	read := func(m *recordingMeter) error {
		o := opts
		o.Meter = m
		r, err := NewReader(bytes.NewReader(data), testKey, o)
		if err != nil {
			return err
		}
		defer r.Close()
		if _, err := r.Metadata(); err != nil {
			return err
		}
		for {
			if _, err := r.Next(); errors.Is(err, io.EOF) {
				return nil
			} else if err != nil {
				return err
			}
		}
	}
	m := &recordingMeter{}
	if err := read(m); err != nil {
		t.Fatal(err)
	}
	sealed := int64(proto.Size(big)) + TagSize
	// As ReaderOptions documents it: the zstd window twice over, 1 MiB of
	// block buffers, the string interner and a plaintext slab.
	overhead := int64(2*DefaultMaxWindow + 1<<20 + internMemory + slabBytes)
	if len(m.charges) == 0 || m.charges[0] != overhead {
		t.Fatalf("charges %v; want the overhead %d first", m.charges, overhead)
	}
	for _, c := range m.charges {
		if c <= 0 {
			t.Errorf("a charge of %d", c)
		}
	}
	if buffers := m.total - overhead; buffers < 2*sealed || m.total > ReaderMemory(opts) {
		t.Errorf("charged %d for the buffers of a %d-byte record (at least twice it), %d in all (at most %d)", buffers, sealed, m.total, ReaderMemory(opts))
	}
	if err := read(&recordingMeter{limit: overhead + sealed}); !errors.Is(err, errMeterFull) {
		t.Errorf("a meter with room for one buffer: %v; want its refusal", err)
	}
}
