package postgres

import (
	"database/sql"
	"encoding/binary"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// binaryRows scans the values of a row straight from their binary wire
// form into the destination types the store's row mappings use, by a type
// switch on each destination and the column's type. pgx looks up and runs
// a scan plan per column through interfaces and reflection: for an
// export's stream of rows that was a fifth of the server's CPU. A row with
// any other destination or column type, or in text form where the two
// forms differ, goes to pgx's
// Scan whole.
type binaryRows struct {
	pgx.Rows
	texts textInterner
	// chunk is where small rows' byte values are carved from, arenaChunk
	// at a time: an allocation a row was a sixth of a listed message's.
	chunk []byte
}

// arenaChunk is how much small rows' bytes are allocated at once; a row
// past a quarter of it has its own.
const arenaChunk = 32 << 10

func newBinaryRows(rows pgx.Rows) *binaryRows { return &binaryRows{Rows: rows} }

func (r *binaryRows) Scan(dest ...any) error {
	fields, raw := r.FieldDescriptions(), r.RawValues()
	if len(fields) != len(dest) || len(raw) != len(dest) {
		return r.Rows.Scan(dest...)
	}
	// One allocation holds every byte value of the row, another every
	// optional value: a message row was sixteen allocations.
	total := 0
	for i, f := range fields {
		if f.DataTypeOID == pgtype.ByteaOID {
			total += len(raw[i])
		}
	}
	a := rowArena{buf: r.room(total), texts: &r.texts}
	for i, d := range dest {
		if !wireForm(fields[i]) || !a.scan(d, fields[i].DataTypeOID, raw[i]) {
			return r.Rows.Scan(dest...)
		}
	}
	return nil
}

// rowArena is where one row's values live. Each byte value gets its own
// stretch of buf, capped at its length, so appending to one never writes
// over another. (Text is still a string of its own: a string over the
// arena would need unsafe for a gain the benchmarks do not show.)
type rowArena struct {
	buf   []byte
	opts  *rowOptionals
	texts *textInterner
}

// rowOptionals holds a row's optional (pointer) values, enough for the
// store's widest row; past them each value is allocated on its own.
type rowOptionals struct {
	ints           [4]int64
	bools          [2]bool
	slices         [2][]byte
	strs           [2]string
	ni, nb, ns, nt int
}

func (a *rowArena) optionals() *rowOptionals {
	if a.opts == nil {
		a.opts = new(rowOptionals)
	}
	return a.opts
}

// bytes copies v into the arena.
func (a *rowArena) bytes(v []byte) []byte {
	off := len(a.buf)
	a.buf = append(a.buf, v...)
	return a.buf[off:len(a.buf):len(a.buf)]
}

func (a *rowArena) text(v []byte) string { return a.texts.text(v) }

// textInterner gives the rows of one query the same string for the same
// short text: a conversation's messages repeat a few senders and content
// types, and each was an allocation a row. It is bounded, so a query of
// distinct texts costs a full map and then plain strings.
type textInterner struct{ seen map[string]string }

const (
	internTexts   = 256
	internTextLen = 128
)

func (t *textInterner) text(v []byte) string {
	if len(v) == 0 || len(v) > internTextLen {
		return string(v)
	}
	if s, ok := t.seen[string(v)]; ok { // the lookup does not allocate
		return s
	}
	s := string(v)
	if len(t.seen) < internTexts {
		if t.seen == nil {
			t.seen = make(map[string]string)
		}
		t.seen[s] = s
	}
	return s
}

// slot stores v in the next free one of slots, or, past them, on its own.
func slot[T any](slots []T, used *int, v T) *T {
	if *used == len(slots) {
		return &v
	}
	slots[*used] = v
	*used++
	return &slots[*used-1]
}

func (a *rowArena) int64p(v int64) *int64 {
	o := a.optionals()
	return slot(o.ints[:], &o.ni, v)
}

func (a *rowArena) boolp(v bool) *bool {
	o := a.optionals()
	return slot(o.bools[:], &o.nb, v)
}

func (a *rowArena) bytesp(v []byte) *[]byte {
	o := a.optionals()
	return slot(o.slices[:], &o.ns, v)
}

func (a *rowArena) textp(v string) *string {
	o := a.optionals()
	return slot(o.strs[:], &o.nt, v)
}

// room returns an empty buffer of capacity n for one row's bytes, carved
// from the current chunk (capped, so that nothing is written past it) or,
// for a large row, its own.
func (r *binaryRows) room(n int) []byte {
	if n > arenaChunk/4 {
		return make([]byte, 0, n)
	}
	if cap(r.chunk)-len(r.chunk) < n {
		r.chunk = make([]byte, 0, arenaChunk)
	}
	off := len(r.chunk)
	r.chunk = r.chunk[:off+n]
	return r.chunk[off : off : off+n]
}

// wireForm reports whether a column's values come as scanBinary reads
// them: binary, or text for the text types, whose two forms are the same
// bytes (pgx asks for text in text form).
func wireForm(f pgconn.FieldDescription) bool {
	return f.Format == pgx.BinaryFormatCode || f.DataTypeOID == pgtype.TextOID || f.DataTypeOID == pgtype.VarcharOID
}

// scan stores v, a column of type oid in binary form (nil for NULL), in
// d, copying bytes into the arena: pgx reuses them for the next row. It
// reports false for anything it does not know, NULL into a destination
// that cannot hold it included, leaving the row to pgx (which then
// reports the error).
func (a *rowArena) scan(d any, oid uint32, v []byte) bool {
	switch d := d.(type) {
	case *[]byte:
		if oid != pgtype.ByteaOID || v == nil {
			return false
		}
		*d = a.bytes(v) // empty, not nil, as pgx scans it
	case **[]byte:
		if oid != pgtype.ByteaOID {
			return false
		}
		*d = nil
		if v != nil {
			*d = a.bytesp(a.bytes(v)) // present, even when empty
		}
	case *string:
		if (oid != pgtype.TextOID && oid != pgtype.VarcharOID) || v == nil {
			return false
		}
		*d = a.text(v)
	case **string:
		if oid != pgtype.TextOID && oid != pgtype.VarcharOID {
			return false
		}
		*d = nil
		if v != nil {
			*d = a.textp(a.text(v))
		}
	case *int64:
		if oid != pgtype.Int8OID || len(v) != 8 {
			return false
		}
		*d = int64(binary.BigEndian.Uint64(v))
	case **int64:
		if oid != pgtype.Int8OID || (v != nil && len(v) != 8) {
			return false
		}
		*d = nil
		if v != nil {
			*d = a.int64p(int64(binary.BigEndian.Uint64(v)))
		}
	case *sql.Null[int64]:
		if oid != pgtype.Int8OID || (v != nil && len(v) != 8) {
			return false
		}
		*d = sql.Null[int64]{}
		if v != nil {
			*d = sql.Null[int64]{V: int64(binary.BigEndian.Uint64(v)), Valid: true}
		}
	case *sql.Null[bool]:
		if oid != pgtype.BoolOID || (v != nil && len(v) != 1) {
			return false
		}
		*d = sql.Null[bool]{}
		if v != nil {
			*d = sql.Null[bool]{V: v[0] != 0, Valid: true}
		}
	case *int32:
		switch {
		case oid == pgtype.Int4OID && len(v) == 4:
			*d = int32(binary.BigEndian.Uint32(v))
		case oid == pgtype.Int2OID && len(v) == 2:
			*d = int32(int16(binary.BigEndian.Uint16(v)))
		default:
			return false
		}
	case **bool:
		if oid != pgtype.BoolOID || (v != nil && len(v) != 1) {
			return false
		}
		*d = nil
		if v != nil {
			*d = a.boolp(v[0] != 0)
		}
	default:
		return false
	}
	return true
}
