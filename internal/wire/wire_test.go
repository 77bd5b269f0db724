package wire

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
)

// sameAsProtowire fails t unless each reader reads b as protowire does,
// and a value read is capped at its length.
func sameAsProtowire(t *testing.T, b []byte) {
	t.Helper()
	num, typ, n := ConsumeTag(b)
	wnum, wtyp, wn := protowire.ConsumeTag(b)
	if n != wn || (n > 0 && (num != wnum || typ != wtyp)) {
		t.Errorf("tag %x: %d %d %d; protowire %d %d %d", b, num, typ, n, wnum, wtyp, wn)
	}
	x, n := ConsumeVarint(b)
	wx, wn := protowire.ConsumeVarint(b)
	if n != wn || x != wx {
		t.Errorf("varint %x: %d %d; protowire %d %d", b, x, n, wx, wn)
	}
	v, n := ConsumeBytes(b)
	wv, wn := protowire.ConsumeBytes(b)
	if n != wn || !bytes.Equal(v, wv) {
		t.Errorf("bytes %x: %d bytes, n %d; protowire %d bytes, n %d", b, len(v), n, len(wv), wn)
	}
	if cap(v) != len(v) {
		t.Errorf("bytes %x: cap %d past the value's %d", b, cap(v), len(v))
	}
}

// TestConsumeMatchesProtowire: at the edges of each in-line form,
// overlong, and cut short.
func TestConsumeMatchesProtowire(t *testing.T) {
	body := bytes.Repeat([]byte{7}, 1<<15)
	for _, size := range []int{0, 1, 126, 127, 128, 129, 255, 256, 1000, 1024, 16383, 16384, 16385} {
		prefix := protowire.AppendVarint(nil, uint64(size))
		for _, extra := range []int{-1, 0, 3} { // cut short, exact, followed by more
			if size+extra >= 0 {
				sameAsProtowire(t, append(bytes.Clone(prefix), body[:size+extra]...))
			}
		}
	}
	for _, b := range [][]byte{{}, {0x00}, {0x08}, {0x7f}, {0x80}, {0x80, 0x00}, {0x82, 0x01}, {0x85, 0x00, 1, 2, 3, 4, 5},
		{0xff, 0xff, 0xff, 0xff, 0x0f}, {0x90, 0x01, 0x01}, bytes.Repeat([]byte{0xff}, 11)} {
		sameAsProtowire(t, b)
	}
}

// FuzzConsumeMatchesProtowire holds the readers to protowire on any bytes.
func FuzzConsumeMatchesProtowire(f *testing.F) {
	f.Add([]byte{0x0a, 0x01, 0x00})
	f.Add([]byte{0x80, 0x01})
	f.Add([]byte{0xff, 0x7f, 0x00})
	f.Add(append([]byte{0x80, 0x08}, bytes.Repeat([]byte{1}, 1024)...))
	f.Fuzz(func(t *testing.T, b []byte) { sameAsProtowire(t, b) })
}

// TestAppendMatchesProtowire: every length and number form, at its edges.
func TestAppendMatchesProtowire(t *testing.T) {
	for _, n := range []int{0, 1, 1<<7 - 1, 1 << 7, 1<<14 - 1, 1 << 14, 1<<21 + 5, 1<<31 - 1} {
		if got, want := AppendLength([]byte{9}, n), protowire.AppendVarint([]byte{9}, uint64(n)); !bytes.Equal(got, want) {
			t.Errorf("length %d: %x, want %x", n, got, want)
		}
	}
	for _, v := range []uint64{0, 1, 1<<7 - 1, 1 << 7, 1<<64 - 1} {
		if got, want := AppendVarint([]byte{9}, v), protowire.AppendVarint([]byte{9}, v); !bytes.Equal(got, want) {
			t.Errorf("varint %d: %x, want %x", v, got, want)
		}
	}
}

// TestBadUTF8Field: the field that is not UTF-8 is named by its path,
// through nested messages, lists and maps; a valid message names none.
func TestBadUTF8Field(t *testing.T) {
	good := &mb.GroupMessageSave{Id: []byte{1}, SenderInboxId: "alice", ContentType: "text"}
	el := func(m *mb.GroupMessageSave) []byte {
		b, err := proto.MarshalOptions{}.Marshal(&ds.BackupElement{Element: &ds.BackupElement_GroupMessage{GroupMessage: m}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	elMD := (&ds.BackupElement{}).ProtoReflect().Descriptor()
	// Marshal refuses invalid UTF-8 itself: write the field by hand.
	raw := protowire.AppendTag(nil, 1, protowire.BytesType)
	raw = protowire.AppendBytes(raw, []byte{1})
	raw = protowire.AppendTag(raw, 7, protowire.BytesType)
	raw = protowire.AppendBytes(raw, []byte("a\xffb"))
	wrapped := protowire.AppendTag(nil, 3, protowire.BytesType)
	wrapped = protowire.AppendBytes(wrapped, raw)
	if proto.Unmarshal(wrapped, &ds.BackupElement{}) == nil {
		t.Fatal("protobuf took invalid UTF-8: the test's premise is gone")
	}
	if got := BadUTF8Field(wrapped, elMD); got != "group_message.sender_inbox_id" {
		t.Errorf("BadUTF8Field = %q, want group_message.sender_inbox_id", got)
	}
	if got := BadUTF8Field(el(good), elMD); got != "" {
		t.Errorf("a valid element names %q", got)
	}
	// A list's index: the third super admin of a group.
	groupMD := (&gb.GroupSave{}).ProtoReflect().Descriptor()
	var meta []byte
	for i := range 3 {
		meta = protowire.AppendTag(meta, 3, protowire.BytesType)
		if i == 2 {
			meta = protowire.AppendBytes(meta, []byte{0xc3})
		} else {
			meta = protowire.AppendString(meta, "ok")
		}
	}
	group := protowire.AppendTag(nil, 14, protowire.BytesType)
	group = protowire.AppendBytes(group, meta)
	if got := BadUTF8Field(group, groupMD); got != "mutable_metadata.super_admin_list[2]" {
		t.Errorf("BadUTF8Field = %q, want mutable_metadata.super_admin_list[2]", got)
	}
	if got := BadUTF8Field([]byte{0xff, 0xff}, groupMD); got != "" {
		t.Errorf("garbage names %q", got)
	}
}

// FuzzBadUTF8Field: any bytes are read without panicking, and a field
// named as not UTF-8 is in a message protobuf refuses.
func FuzzBadUTF8Field(f *testing.F) {
	f.Add([]byte{0x1a, 0x05, 0x3a, 0x03, 'a', 0xff, 'b'})
	f.Add([]byte{0x1a, 0x04, 0x3a, 0x02, 'o', 'k'})
	f.Add([]byte{0xff, 0xff})
	md := (&ds.BackupElement{}).ProtoReflect().Descriptor()
	f.Fuzz(func(t *testing.T, b []byte) {
		field := BadUTF8Field(b, md)
		if field != "" && proto.Unmarshal(b, &ds.BackupElement{}) == nil {
			t.Fatalf("%x: named %s, and protobuf takes the message", b, field)
		}
	})
}
