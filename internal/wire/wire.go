// Package wire reads and writes the protobuf wire forms the hand parsers
// and writers of envelopes and archive records use: protowire's, with the
// short forms nearly every field takes (one-byte tags and numbers,
// lengths under 16 KiB) done in line, where a call to protowire per field
// had been a large share of a record's cost. Anything longer goes to
// protowire, so every input reads exactly as protowire reads it.
package wire

import (
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// ConsumeTag is protowire.ConsumeTag.
func ConsumeTag(b []byte) (protowire.Number, protowire.Type, int) {
	if len(b) > 0 && b[0] < 0x80 && b[0]>>3 != 0 {
		return protowire.Number(b[0] >> 3), protowire.Type(b[0] & 7), 1
	}
	return protowire.ConsumeTag(b)
}

// ConsumeBytes is protowire.ConsumeBytes, with the value capped at its
// length: values alias the message's bytes, and an append to one must not
// write over the field after it.
func ConsumeBytes(b []byte) ([]byte, int) {
	switch {
	case len(b) > 0 && b[0] < 0x80:
		if n := 1 + int(b[0]); n <= len(b) {
			return b[1:n:n], n
		}
	case len(b) > 1 && b[1] < 0x80:
		if n := 2 + (int(b[0]&0x7f) | int(b[1])<<7); n <= len(b) {
			return b[2:n:n], n
		}
	}
	v, n := protowire.ConsumeBytes(b)
	return v[:len(v):len(v)], n
}

// ConsumeVarint is protowire.ConsumeVarint.
func ConsumeVarint(b []byte) (uint64, int) {
	if len(b) > 0 && b[0] < 0x80 {
		return uint64(b[0]), 1
	}
	return protowire.ConsumeVarint(b)
}

// AppendLength is AppendVarint of a length.
func AppendLength(b []byte, n int) []byte { return AppendVarint(b, uint64(n)) }

// AppendVarint is protowire.AppendVarint.
func AppendVarint(b []byte, v uint64) []byte {
	switch {
	case v < 1<<7:
		return append(b, byte(v))
	case v < 1<<14:
		return append(b, byte(v)|0x80, byte(v>>7))
	}
	return protowire.AppendVarint(b, v)
}

// BadUTF8Field names the first string field of b, a message of md on the
// wire, that is not valid UTF-8: its path from md ("messages[2].sender_
// inbox_id", "group.mutable_metadata.attributes.value"), or "" when none
// is (or b does not parse far enough to find one). Protobuf refuses such a
// message without naming the field; a caller told which field is wrong
// can fix it.
func BadUTF8Field(b []byte, md protoreflect.MessageDescriptor) string {
	return badUTF8(b, md, "", 0)
}

// maxUTF8Depth bounds the recursion as protobuf bounds nesting.
const maxUTF8Depth = 100

func badUTF8(b []byte, md protoreflect.MessageDescriptor, prefix string, depth int) string {
	if depth > maxUTF8Depth {
		return ""
	}
	seen := map[protowire.Number]int{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return ""
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		fd := md.Fields().ByNumber(num)
		if fd == nil {
			continue
		}
		name := prefix + string(fd.Name())
		if fd.IsList() {
			name = fmt.Sprintf("%s[%d]", name, seen[num])
			seen[num]++
		}
		switch fd.Kind() {
		case protoreflect.StringKind:
			if !utf8.Valid(v) {
				return name
			}
		case protoreflect.MessageKind, protoreflect.GroupKind:
			if got := badUTF8(v, fd.Message(), name+".", depth+1); got != "" {
				return got
			}
		}
	}
	return ""
}
