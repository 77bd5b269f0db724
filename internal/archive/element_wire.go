package archive

//lint:file-ignore SA1019 content_type_save is retired but still carried as given (ARCH-004).

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/wire"
)

// Message elements are nearly every record of a real archive, and the
// generic protobuf path spent most of the reader's time on them
// (reflection, ten allocations, every bytes field copied out of the
// plaintext) and much of the writer's. Both directions handle that one
// shape by hand and leave every other shape to the protobuf library, which
// defines the rules: FuzzParseElementMatchesProto and
// FuzzAppendElementMatchesProto hold the hand paths to proto.Unmarshal and
// deterministic proto.Marshal.

// handElement is a message element in one allocation: the element, its
// oneof wrapper, the message and its optional scalars.
type handElement struct {
	el                 ds.BackupElement
	wrapper            ds.BackupElement_GroupMessage
	msg                mb.GroupMessageSave
	seq, orig, expires int64
	known              bool
}

// parseElement parses a BackupElement as proto.Unmarshal does. When the
// hand path parses a message element it fills me and reports aliased: the
// element's bytes fields point into b, which the caller must then not
// reuse while the element lives. strs makes the message's strings.
func parseElement(b []byte, me *handElement, strs *interner) (el *ds.BackupElement, aliased bool, err error) {
	if parseMessageElement(b, me, strs) {
		return &me.el, true, nil
	}
	el = &ds.BackupElement{}
	if err := proto.Unmarshal(b, el); err != nil {
		return nil, false, err
	}
	return el, false, nil
}

// parseMessageElement parses b into me when it is a single group_message
// field whose message holds only known fields, each once, with its
// declared wire type and valid UTF-8 in its strings. Anything else is
// left to proto.Unmarshal (false): merged repeats, unknown fields and
// errors are its to handle.
func parseMessageElement(b []byte, me *handElement, strs *interner) bool {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || num != 3 || typ != protowire.BytesType {
		return false
	}
	inner, m := protowire.ConsumeBytes(b[n:])
	if m < 0 || n+m != len(b) {
		return false
	}
	*me = handElement{}
	if !parseMessage(inner, me, strs) {
		return false
	}
	me.wrapper.GroupMessage = &me.msg
	me.el.Element = &me.wrapper
	return true
}

// interner makes strings from bytes, returning the same string for bytes
// it has seen: a message's sender, authority and content type repeat
// across a conversation, so most records allocate none. It keeps at most
// internMax strings of internLen bytes.
type interner struct {
	m map[string]string
	// last is the string each of the three string fields last held. A
	// field most often repeats it (a conversation's authority and content
	// type, a sender's run of messages), and comparing with it costs less
	// than hashing into m and validating UTF-8 again.
	last [3]string
}

const (
	internMax = 1024
	internLen = 128
	// internMemory bounds what an interner holds, map overhead and the
	// three strings it last returned included.
	internMemory = internMax*(internLen+64) + 3*internLen
)

// field returns the string of field slot's bytes b, or false when b is
// not valid UTF-8.
func (in *interner) field(slot int, b []byte) (string, bool) {
	if s := in.last[slot]; s == string(b) {
		return s, true
	}
	if !utf8.Valid(b) {
		return "", false
	}
	s := in.str(b)
	if len(s) <= internLen {
		in.last[slot] = s
	}
	return s, true
}

// set stores field's string in *dst: false when it is not UTF-8.
func (in *interner) set(slot int, b []byte, dst *string) bool {
	s, ok := in.field(slot, b)
	*dst = s
	return ok
}

func (in *interner) str(b []byte) string {
	if s, ok := in.m[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(b) <= internLen {
		if in.m == nil || len(in.m) >= internMax {
			in.m = make(map[string]string, 64)
		}
		in.m[s] = s
	}
	return s
}

func parseMessage(b []byte, me *handElement, strs *interner) bool {
	var seen uint32
	for len(b) > 0 {
		num, typ, n := wire.ConsumeTag(b)
		if n < 0 || num > 18 || seen&(1<<num) != 0 {
			return false
		}
		seen |= 1 << num
		b = b[n:]
		var ok bool
		switch typ {
		case protowire.BytesType:
			var v []byte
			if v, n = wire.ConsumeBytes(b); n >= 0 {
				ok = messageBytes(&me.msg, strs, num, v)
			}
		case protowire.VarintType:
			var x uint64
			if x, n = wire.ConsumeVarint(b); n >= 0 {
				ok = messageVarint(me, num, x)
			}
		}
		if !ok {
			return false
		}
		b = b[n:]
	}
	return true
}

// messageBytes sets m's length-delimited field num to v: false for a
// field a GroupMessageSave has not of that type, or a string not UTF-8.
func messageBytes(m *mb.GroupMessageSave, strs *interner, num protowire.Number, v []byte) bool {
	switch num {
	case 1:
		m.Id = v
	case 2:
		m.GroupId = v
	case 3:
		m.DecryptedMessageBytes = v
	case 6:
		m.SenderInstallationId = v
	case 13:
		m.ReferenceId = v // present: never nil, since b is not
	case 7:
		return strs.set(0, v, &m.SenderInboxId)
	case 12:
		return strs.set(1, v, &m.AuthorityId)
	case 16:
		return strs.set(2, v, &m.ContentType)
	default:
		return false
	}
	return true
}

// messageVarint sets me's varint field num to x: false for a field a
// GroupMessageSave has not of that type. Optional fields point into me,
// which holds their values.
func messageVarint(me *handElement, num protowire.Number, x uint64) bool {
	m := &me.msg
	switch num {
	case 4:
		m.SentAtNs = int64(x)
	case 5:
		m.Kind = mb.GroupMessageKindSave(int32(x))
	case 8:
		m.DeliveryStatus = mb.DeliveryStatusSave(int32(x))
	case 9:
		m.ContentTypeSave = mb.ContentTypeSave(int32(x))
	case 10:
		m.VersionMajor = int32(x)
	case 11:
		m.VersionMinor = int32(x)
	case 14:
		me.seq = int64(x)
		m.SequenceId = &me.seq
	case 15:
		me.orig = int64(x)
		m.OriginatorId = &me.orig
	case 17:
		me.expires = int64(x)
		m.ExpiresAtNs = &me.expires
	case 18:
		me.known = protowire.DecodeBool(x)
		m.ExpiryKnown = &me.known
	default:
		return false
	}
	return true
}

// appendElement appends el's wire form to buf: byte for byte what
// deterministic proto.Marshal writes.
func appendElement(buf []byte, el *ds.BackupElement) ([]byte, error) {
	w, ok := el.GetElement().(*ds.BackupElement_GroupMessage)
	if !ok || w.GroupMessage == nil || !handMarshalable(el, w.GroupMessage) {
		return marshal.MarshalAppend(buf, el)
	}
	m := w.GroupMessage
	buf = wire.AppendLength(append(buf, tagGroupMessage...), messageSize(m))
	return appendMessage(buf, m), nil
}

// handMarshalable: no unknown fields to carry, and strings the library
// would accept (it refuses invalid UTF-8, and then so do we, through it).
func handMarshalable(el *ds.BackupElement, m *mb.GroupMessageSave) bool {
	return len(el.ProtoReflect().GetUnknown()) == 0 && len(m.ProtoReflect().GetUnknown()) == 0 &&
		utf8.ValidString(m.SenderInboxId) && utf8.ValidString(m.AuthorityId) && utf8.ValidString(m.ContentType)
}

// The fields in number order, as deterministic marshalling writes them:
// implicit-presence fields when not zero, optional ones when set. Each
// tag is written as its wire bytes (messageTags), and short lengths and
// small numbers in line: a record's fields cost about what copying its
// bytes does, not a varint encoder's call each.

func appendMessage(b []byte, m *mb.GroupMessageSave) []byte {
	b = appendBytes(b, tagID, m.Id)
	b = appendBytes(b, tagGroupID, m.GroupId)
	b = appendBytes(b, tagContent, m.DecryptedMessageBytes)
	b = appendVarint(b, tagSentAt, uint64(m.SentAtNs))
	b = appendVarint(b, tagKind, uint64(m.Kind))
	b = appendBytes(b, tagInstallation, m.SenderInstallationId)
	b = appendBytes(b, tagInbox, m.SenderInboxId)
	b = appendVarint(b, tagDelivery, uint64(m.DeliveryStatus))
	b = appendVarint(b, tagContentTypeSave, uint64(m.ContentTypeSave))
	b = appendVarint(b, tagVersionMajor, uint64(m.VersionMajor))
	b = appendVarint(b, tagVersionMinor, uint64(m.VersionMinor))
	b = appendBytes(b, tagAuthority, m.AuthorityId)
	if m.ReferenceId != nil {
		// Present even when empty: an optional field.
		b = append(wire.AppendLength(append(b, tagReference...), len(m.ReferenceId)), m.ReferenceId...)
	}
	b = appendOptional(b, tagSequence, m.SequenceId)
	b = appendOptional(b, tagOriginator, m.OriginatorId)
	b = appendBytes(b, tagContentType, m.ContentType)
	b = appendOptional(b, tagExpiresAt, m.ExpiresAtNs)
	if m.ExpiryKnown != nil {
		b = append(append(b, tagExpiryKnown...), byte(protowire.EncodeBool(*m.ExpiryKnown)))
	}
	return b
}

// messageTags are GroupMessageSave's field tags as they are written: the
// field number shifted left three, or'ed with the wire type (2 bytes, 0
// varint), as a varint. TestMessageTags checks each against protowire.
const (
	tagID              = "\x0a"     // 1, bytes
	tagGroupID         = "\x12"     // 2, bytes
	tagContent         = "\x1a"     // 3, bytes
	tagSentAt          = "\x20"     // 4, varint
	tagKind            = "\x28"     // 5, varint
	tagInstallation    = "\x32"     // 6, bytes
	tagInbox           = "\x3a"     // 7, bytes
	tagDelivery        = "\x40"     // 8, varint
	tagContentTypeSave = "\x48"     // 9, varint
	tagVersionMajor    = "\x50"     // 10, varint
	tagVersionMinor    = "\x58"     // 11, varint
	tagAuthority       = "\x62"     // 12, bytes
	tagReference       = "\x6a"     // 13, bytes
	tagSequence        = "\x70"     // 14, varint
	tagOriginator      = "\x78"     // 15, varint
	tagContentType     = "\x82\x01" // 16, bytes
	tagExpiresAt       = "\x88\x01" // 17, varint
	tagExpiryKnown     = "\x90\x01" // 18, varint
	// tagGroupMessage is BackupElement's group_message (3, bytes).
	tagGroupMessage = "\x1a"
)

// ElementSize is proto.Size(el), without reflection for a message element:
// what import charges its read-ahead and export weighs its batches by, once
// a record.
func ElementSize(el *ds.BackupElement) int {
	if w, ok := el.GetElement().(*ds.BackupElement_GroupMessage); ok && w.GroupMessage != nil &&
		len(el.ProtoReflect().GetUnknown()) == 0 && len(w.GroupMessage.ProtoReflect().GetUnknown()) == 0 {
		return protowire.SizeTag(3) + protowire.SizeBytes(messageSize(w.GroupMessage))
	}
	return proto.Size(el)
}

func messageSize(m *mb.GroupMessageSave) int {
	n := bytesSize(1, len(m.Id)) + bytesSize(2, len(m.GroupId)) + bytesSize(3, len(m.DecryptedMessageBytes)) +
		varintSize(4, uint64(m.SentAtNs)) + varintSize(5, uint64(m.Kind)) + bytesSize(6, len(m.SenderInstallationId)) +
		bytesSize(7, len(m.SenderInboxId)) + varintSize(8, uint64(m.DeliveryStatus)) + varintSize(9, uint64(m.ContentTypeSave)) +
		varintSize(10, uint64(m.VersionMajor)) + varintSize(11, uint64(m.VersionMinor)) + bytesSize(12, len(m.AuthorityId)) +
		optionalSize(14, m.SequenceId) + optionalSize(15, m.OriginatorId) + bytesSize(16, len(m.ContentType)) +
		optionalSize(17, m.ExpiresAtNs)
	if m.ReferenceId != nil {
		n += protowire.SizeTag(13) + protowire.SizeBytes(len(m.ReferenceId))
	}
	if m.ExpiryKnown != nil {
		n += protowire.SizeTag(18) + 1
	}
	return n
}

// appendBytes appends a bytes or string field when it is not empty.
func appendBytes[T []byte | string](b []byte, tag string, v T) []byte {
	if len(v) == 0 {
		return b
	}
	return append(wire.AppendLength(append(b, tag...), len(v)), v...)
}

func appendVarint(b []byte, tag string, v uint64) []byte {
	if v == 0 {
		return b
	}
	return wire.AppendVarint(append(b, tag...), v)
}

func appendOptional(b []byte, tag string, v *int64) []byte {
	if v == nil {
		return b
	}
	return wire.AppendVarint(append(b, tag...), uint64(*v))
}

func bytesSize(num protowire.Number, n int) int {
	if n == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

func varintSize(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

func optionalSize(num protowire.Number, v *int64) int {
	if v == nil {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(uint64(*v))
}
