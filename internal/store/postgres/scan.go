package postgres

import (
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
type binaryRows struct{ pgx.Rows }

func (r binaryRows) Scan(dest ...any) error {
	fields, raw := r.FieldDescriptions(), r.RawValues()
	if len(fields) != len(dest) || len(raw) != len(dest) {
		return r.Rows.Scan(dest...)
	}
	for i, d := range dest {
		if !wireForm(fields[i]) || !scanBinary(d, fields[i].DataTypeOID, raw[i]) {
			return r.Rows.Scan(dest...)
		}
	}
	return nil
}

// wireForm reports whether a column's values come as scanBinary reads
// them: binary, or text for the text types, whose two forms are the same
// bytes (pgx asks for text in text form).
func wireForm(f pgconn.FieldDescription) bool {
	return f.Format == pgx.BinaryFormatCode || f.DataTypeOID == pgtype.TextOID || f.DataTypeOID == pgtype.VarcharOID
}

// scanBinary stores v, a column of type oid in binary form (nil for NULL),
// in d, copying bytes: pgx reuses them for the next row. It reports false
// for anything it does not know, NULL into a destination that cannot hold
// it included, leaving the row to pgx (which then reports the error).
func scanBinary(d any, oid uint32, v []byte) bool {
	switch d := d.(type) {
	case *[]byte:
		if oid != pgtype.ByteaOID || v == nil {
			return false
		}
		*d = append([]byte{}, v...) // empty, not nil, as pgx scans it
	case **[]byte:
		if oid != pgtype.ByteaOID {
			return false
		}
		*d = nil
		if v != nil {
			b := append([]byte{}, v...) // present, even when empty
			*d = &b
		}
	case *string:
		if (oid != pgtype.TextOID && oid != pgtype.VarcharOID) || v == nil {
			return false
		}
		*d = string(v)
	case **string:
		if oid != pgtype.TextOID && oid != pgtype.VarcharOID {
			return false
		}
		*d = nil
		if v != nil {
			s := string(v)
			*d = &s
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
			n := int64(binary.BigEndian.Uint64(v))
			*d = &n
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
			b := v[0] != 0
			*d = &b
		}
	default:
		return false
	}
	return true
}
