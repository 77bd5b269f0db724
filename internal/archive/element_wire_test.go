package archive

//lint:file-ignore SA1019 content_type_save is retired but still carried as given (ARCH-004).

import (
	"bytes"
	"io"
	"runtime"
	"testing"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
)

func ptr[T any](v T) *T { return &v }

// fullMessageElement sets every field of a message, optional ones included,
// with negative enums and integers (ten-byte varints) and two-byte tags.
func fullMessageElement() *ds.BackupElement {
	return &ds.BackupElement{Element: &ds.BackupElement_GroupMessage{GroupMessage: &mb.GroupMessageSave{
		Id: []byte("id"), GroupId: []byte("group"), DecryptedMessageBytes: []byte("content"), SentAtNs: -5,
		Kind: mb.GroupMessageKindSave_GROUP_MESSAGE_KIND_SAVE_APPLICATION, SenderInstallationId: []byte{1, 2},
		SenderInboxId: "inbox ✓", DeliveryStatus: mb.DeliveryStatusSave(-1), ContentTypeSave: mb.ContentTypeSave_CONTENT_TYPE_SAVE_TEXT,
		VersionMajor: 1, VersionMinor: -2, AuthorityId: "xmtp.org", ReferenceId: []byte{}, SequenceId: ptr(int64(0)),
		OriginatorId: ptr(int64(-9)), ContentType: "text", ExpiresAtNs: ptr(int64(1 << 62)), ExpiryKnown: ptr(false),
	}}}
}

// TestAppendElementIsDeterministicMarshal: the writer's hand path writes
// byte for byte what deterministic proto.Marshal writes, for every field,
// and the reader's hand path parses it back equal, aliasing the bytes.
func TestAppendElementIsDeterministicMarshal(t *testing.T) {
	for name, el := range map[string]*ds.BackupElement{
		"every field": fullMessageElement(),
		"empty":       {Element: &ds.BackupElement_GroupMessage{GroupMessage: &mb.GroupMessageSave{}}},
		"sample":      messageElement("m1", "g1"),
		"bench":       benchElement(),
	} {
		want, err := marshal.Marshal(el)
		if err != nil {
			t.Fatal(err)
		}
		got, err := appendElement(nil, el)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: ours %x (%v)\nproto %x", name, got, err, want)
		}
		parsed, aliased, err := parseElement(got, new(handElement), new(interner))
		if err != nil || !aliased || !proto.Equal(parsed, el) {
			t.Errorf("%s: parsed %v, aliased %v, %v", name, parsed, aliased, err)
		}
	}
}

// FuzzParseElementMatchesProto holds parseElement to proto.Unmarshal: the
// same accept or reject and an equal element, unknown fields included
// (anything the hand path does not know goes to proto.Unmarshal).
func FuzzParseElementMatchesProto(f *testing.F) {
	for _, el := range append(sampleElements(), fullMessageElement(), benchElement()) {
		b, _ := marshal.Marshal(el)
		f.Add(b)
	}
	full, _ := marshal.Marshal(fullMessageElement())
	f.Add(append(bytes.Clone(full), full...))         // the element twice: merged
	f.Add([]byte{0x1a, 0x04, 0x08, 0x01, 0x08, 0x02}) // a field twice, with a wrong wire type
	f.Add([]byte{0x1a, 0x03, 0x3a, 0x01, 0xff})       // invalid UTF-8 in sender_inbox_id
	f.Add([]byte{0x1a, 0x04, 0xa0, 0x01, 0x01, 0x00}) // an unknown field (20)
	f.Add([]byte{0x1a, 0x02, 0x90, 0x01, 0x02})       // expiry_known = 2
	// Strings as long as the primed element's, with other bytes.
	other := fullMessageElement()
	other.GetGroupMessage().SenderInboxId, other.GetGroupMessage().AuthorityId = "inbox ✗", "xmtp.net"
	b, _ := marshal.Marshal(other)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		theirs := &ds.BackupElement{}
		errTheirs := proto.Unmarshal(b, theirs)
		// One interner for a sequence, as a Reader has: primed with
		// another record's strings, then b twice, so that b's strings are
		// read both fresh and as the ones each field last held.
		strs := new(interner)
		if _, _, err := parseElement(full, new(handElement), strs); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			ours, _, errOurs := parseElement(b, new(handElement), strs)
			if (errOurs == nil) != (errTheirs == nil) {
				t.Fatalf("ours: %v, proto: %v", errOurs, errTheirs)
			}
			if errOurs == nil && !proto.Equal(ours, theirs) {
				t.Fatalf("ours %v\nproto %v", ours, theirs)
			}
		}
	})
}

// FuzzAppendElementMatchesProto holds appendElement to deterministic
// proto.Marshal over messages built from the fuzzer's values: the same
// bytes, or both refusing (invalid UTF-8).
func FuzzAppendElementMatchesProto(f *testing.F) {
	f.Add([]byte("id"), []byte("content"), "inbox", "text", int64(7), int32(1), int32(-1), uint8(0xff))
	f.Add([]byte{}, []byte{}, "", "", int64(0), int32(0), int32(0), uint8(0))
	f.Add([]byte{0}, bytes.Repeat([]byte{1}, 300), "\xff", "x", int64(-1), int32(-7), int32(1<<30), uint8(0x55))
	f.Fuzz(func(t *testing.T, id, content []byte, sender, contentType string, n int64, e1, e2 int32, optional uint8) {
		m := &mb.GroupMessageSave{Id: id, GroupId: id, DecryptedMessageBytes: content, SentAtNs: n,
			Kind: mb.GroupMessageKindSave(e1), SenderInstallationId: content, SenderInboxId: sender,
			DeliveryStatus: mb.DeliveryStatusSave(e2), ContentTypeSave: mb.ContentTypeSave(e1), VersionMajor: e1,
			VersionMinor: e2, AuthorityId: contentType, ContentType: contentType}
		if optional&1 != 0 {
			m.ReferenceId = id
			if m.ReferenceId == nil {
				m.ReferenceId = []byte{}
			}
		}
		if optional&2 != 0 {
			m.SequenceId = ptr(n)
		}
		if optional&4 != 0 {
			m.OriginatorId = ptr(-n)
		}
		if optional&8 != 0 {
			m.ExpiresAtNs = ptr(n / 3)
		}
		if optional&16 != 0 {
			m.ExpiryKnown = ptr(optional&32 != 0)
		}
		el := &ds.BackupElement{Element: &ds.BackupElement_GroupMessage{GroupMessage: m}}
		want, errTheirs := marshal.Marshal(el)
		got, errOurs := appendElement([]byte{}, el)
		if (errOurs == nil) != (errTheirs == nil) {
			t.Fatalf("ours: %v, proto: %v", errOurs, errTheirs)
		}
		if errOurs == nil && !bytes.Equal(got, want) {
			t.Fatalf("ours  %x\nproto %x", got, want)
		}
	})
}

// TestNextAndNextSharedMixedSizes reads records small and large (past a
// slab's share), alternating Next and NextShared, and checks every element
// Next returned is still intact after the reads that followed it.
func TestNextAndNextSharedMixedSizes(t *testing.T) {
	var els []*ds.BackupElement
	for i, size := range []int{1, 10 << 10, 17 << 10, 100 << 10, 3, 70 << 10, 16 << 10, 0, 200} {
		el := fullMessageElement()
		el.GetGroupMessage().DecryptedMessageBytes = bytes.Repeat([]byte{byte(i + 1)}, size)
		el.GetGroupMessage().Id = []byte{byte(i)}
		els = append(els, el)
	}
	data := write(t, nil, append([]*ds.BackupElement{metadataElement()}, append(els, els...)...)...)
	r, err := NewReader(bytes.NewReader(data), testKey, ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var kept []*ds.BackupElement
	for i := range 2 * len(els) {
		next := r.Next
		if i%3 == 2 {
			next = r.NextShared
		}
		el, err := next()
		if err != nil {
			t.Fatalf("record %d: %v", i+1, err)
		}
		if !proto.Equal(el, els[i%len(els)]) {
			t.Fatalf("record %d read differently", i+1)
		}
		if i%3 != 2 {
			kept = append(kept, el)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
	for i, el := range kept {
		want := els[(i+i/2)%len(els)]
		if !proto.Equal(el, want) {
			t.Errorf("element %d that Next returned changed after later reads", i)
		}
	}
}

// TestMessageSizeIsProtoSize: the hand-computed size is proto.Size's.
func TestMessageSizeIsProtoSize(t *testing.T) {
	for _, el := range []*ds.BackupElement{fullMessageElement(), benchElement(), messageElement("m", "g"), {Element: &ds.BackupElement_GroupMessage{GroupMessage: &mb.GroupMessageSave{}}}} {
		m := el.GetGroupMessage()
		if got, want := messageSize(m), proto.Size(m); got != want {
			t.Errorf("MessageSize %d, proto.Size %d", got, want)
		}
		if got, want := ElementSize(el), proto.Size(el); got != want {
			t.Errorf("ElementSize %d, proto.Size %d", got, want)
		}
	}
}

// TestNextKeepsOnlyWhatTheCallerKeeps: an element Next returned holds its
// own bytes and nothing of the elements read before it, so a caller that
// keeps one element of many keeps one element's memory.
func TestNextKeepsOnlyWhatTheCallerKeeps(t *testing.T) {
	const n, size = 48, 1 << 20
	data := func() []byte { // the elements written are garbage after
		els := []*ds.BackupElement{metadataElement()}
		for i := range n {
			el := fullMessageElement()
			el.GetGroupMessage().DecryptedMessageBytes = bytes.Repeat([]byte{byte(i)}, size)
			els = append(els, el)
		}
		return write(t, nil, els...)
	}()
	r, err := NewReader(bytes.NewReader(data), testKey, ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var kept *ds.BackupElement
	for {
		el, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		kept = el
	}
	r.Close()
	r = nil
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	live := ms.HeapAlloc - uint64(cap(data))
	if len(kept.GetGroupMessage().GetDecryptedMessageBytes()) != size {
		t.Fatal("kept element lost its content")
	}
	if live > 8<<20 {
		t.Errorf("keeping one element of %d MiB keeps %d MiB live", size>>20, live>>20)
	} else {
		t.Logf("keeping one element of %d MiB: %.1f MiB live", size>>20, float64(live)/(1<<20))
	}
	runtime.KeepAlive(data)
	runtime.KeepAlive(kept)
}

// TestInternerField: a field's bytes equal to the string it last held come
// back as that string; other bytes are checked for UTF-8 and interned; a
// long string is not kept past its record.
func TestInternerField(t *testing.T) {
	var in interner
	a, ok := in.field(0, []byte("inbox-a"))
	if !ok || a != "inbox-a" {
		t.Fatalf("field: %q, %v", a, ok)
	}
	again, _ := in.field(0, []byte("inbox-a"))
	if unsafe.StringData(again) != unsafe.StringData(a) {
		t.Error("the same bytes again made a new string")
	}
	if s, ok := in.field(0, []byte("inbox-\xff")); ok {
		t.Errorf("invalid UTF-8 accepted as %q", s)
	}
	if s, _ := in.field(1, []byte("inbox-a")); s != "inbox-a" {
		t.Errorf("another field: %q", s)
	}
	long := bytes.Repeat([]byte("x"), internLen+1)
	if s, ok := in.field(2, long); !ok || s != string(long) {
		t.Fatalf("long: %v", ok)
	}
	if in.last[2] != "" {
		t.Errorf("a string of %d bytes was kept", internLen+1)
	}
}

// TestMessageTags: each tag the writer writes as bytes is the field's tag
// as protowire encodes it.
func TestMessageTags(t *testing.T) {
	for _, c := range []struct {
		tag string
		num protowire.Number
		typ protowire.Type
	}{
		{tagID, 1, protowire.BytesType}, {tagGroupID, 2, protowire.BytesType}, {tagContent, 3, protowire.BytesType},
		{tagSentAt, 4, protowire.VarintType}, {tagKind, 5, protowire.VarintType}, {tagInstallation, 6, protowire.BytesType},
		{tagInbox, 7, protowire.BytesType}, {tagDelivery, 8, protowire.VarintType}, {tagContentTypeSave, 9, protowire.VarintType},
		{tagVersionMajor, 10, protowire.VarintType}, {tagVersionMinor, 11, protowire.VarintType}, {tagAuthority, 12, protowire.BytesType},
		{tagReference, 13, protowire.BytesType}, {tagSequence, 14, protowire.VarintType}, {tagOriginator, 15, protowire.VarintType},
		{tagContentType, 16, protowire.BytesType}, {tagExpiresAt, 17, protowire.VarintType}, {tagExpiryKnown, 18, protowire.VarintType},
		{tagGroupMessage, 3, protowire.BytesType},
	} {
		if want := string(protowire.AppendTag(nil, c.num, c.typ)); c.tag != want {
			t.Errorf("field %d: %x, want %x", c.num, c.tag, want)
		}
	}
}
