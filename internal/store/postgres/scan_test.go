package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/jackc/pgx/v5"
)

// connectForScan connects to the test server, closed when t ends.
func connectForScan(t *testing.T) *pgx.Conn {
	t.Helper()
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		t.Fatal("TEST_DATABASE_URL is not set: run the tests with make test, which starts PostgreSQL")
	}
	c, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// TestBinaryScanMatchesPgx: the store's binary scan and pgx's own Scan
// give the same values for every destination type the row mappings use,
// with NULLs, empty values and negative integers, from a real server.
func TestBinaryScanMatchesPgx(t *testing.T) {
	c := connectForScan(t)
	const query = `SELECT '\x0102'::bytea, ''::bytea, NULL::bytea, ''::bytea, 'text ✓'::text, NULL::text, 'v'::text,
		-5::int8, NULL::int8, 9::int8, -7::int4, -3::int2, true, NULL::bool, false, 11::int8, NULL::int8, true, NULL::bool`
	scanWith := func(scan func(dest ...any) error) []any {
		var (
			b1, b2      []byte
			nb, eb      *[]byte
			s1          string
			ns, ps      *string
			i8          int64
			ni8, pi8    *int64
			i4, i2      int32
			bt, nbt, bf *bool
			si8, sn8    sql.Null[int64]
			sbt, snb    sql.Null[bool]
		)
		dest := []any{&b1, &b2, &nb, &eb, &s1, &ns, &ps, &i8, &ni8, &pi8, &i4, &i2, &bt, &nbt, &bf, &si8, &sn8, &sbt, &snb}
		if err := scan(dest...); err != nil {
			t.Fatal(err)
		}
		return dest
	}
	var values [2][]any
	for i, wrap := range []func(pgx.Rows) interface{ Scan(...any) error }{
		func(r pgx.Rows) interface{ Scan(...any) error } { return r },
		func(r pgx.Rows) interface{ Scan(...any) error } { return newBinaryRows(r) },
	} {
		rows, err := c.Query(t.Context(), query)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			if i == 1 {
				// The fast path, not pgx behind it: every column binary
				// and taken by rowArena.scan.
				for j, f := range rows.FieldDescriptions() {
					probe := scanWith(func(dest ...any) error { return nil })
					if !wireForm(f) || !(&rowArena{texts: new(textInterner)}).scan(probe[j], f.DataTypeOID, rows.RawValues()[j]) {
						t.Errorf("column %d (type %d, format %d) is left to pgx", j, f.DataTypeOID, f.Format)
					}
				}
			}
			values[i] = scanWith(wrap(rows).Scan)
		}
		rows.Close()
		if rows.Err() != nil {
			t.Fatal(rows.Err())
		}
	}
	pgxs, ours := values[0], values[1]
	for i := range pgxs {
		if !reflect.DeepEqual(ours[i], pgxs[i]) {
			t.Errorf("column %d: ours %#v, pgx %#v", i, reflect.ValueOf(ours[i]).Elem().Interface(), reflect.ValueOf(pgxs[i]).Elem().Interface())
		}
	}
	a := new(rowArena)
	if !a.scan(new([]byte), 17, []byte{1}) || a.scan(new([]byte), 17, nil) || a.scan(new(int64), 20, []byte{1}) {
		t.Error("rowArena.scan takes what it must leave to pgx, or leaves what it can take")
	}
	// Byte values share the row's arena, each capped at its own length,
	// so appending to one reallocates it rather than writing over the next.
	if b := ours[0].(*[]byte); cap(*b) != len(*b) {
		t.Errorf("a scanned value of %d bytes has capacity %d", len(*b), cap(*b))
	}
}

// TestTextInterner: a query's repeated short texts share one string, the
// table stops growing at its bound, and every text comes back as itself.
func TestTextInterner(t *testing.T) {
	var in textInterner
	a, b := in.text([]byte("sender-inbox")), in.text([]byte("sender-inbox"))
	if a != "sender-inbox" || unsafe.StringData(a) != unsafe.StringData(b) {
		t.Fatalf("a repeated text is not shared: %q %q", a, b)
	}
	for i := range 3 * internTexts {
		v := fmt.Sprintf("text-%d", i)
		if got := in.text([]byte(v)); got != v {
			t.Fatalf("text %q came back as %q", v, got)
		}
	}
	if len(in.seen) != internTexts {
		t.Fatalf("the table holds %d texts, want its bound %d", len(in.seen), internTexts)
	}
	long := strings.Repeat("x", internTextLen+1)
	if got := in.text([]byte(long)); got != long || in.text(nil) != "" {
		t.Fatal("a long or empty text is not itself")
	}
}

// TestBinaryRowsChunks: rows' byte values carved from shared chunks stay
// each row's own through many rows, small and large, each capped at its
// length so that appending to one cannot write over another.
func TestBinaryRowsChunks(t *testing.T) {
	c := connectForScan(t)
	rows, err := c.Query(t.Context(), `SELECT int4send(i), decode(repeat(lpad(to_hex(i % 256), 2, '0'), CASE WHEN i % 500 = 0 THEN 20000 ELSE i % 97 END), 'hex')
		FROM generate_series(1, 3000) i`)
	if err != nil {
		t.Fatal(err)
	}
	br := newBinaryRows(rows)
	var got [][2][]byte
	for rows.Next() {
		var id, body []byte
		if err := br.Scan(&id, &body); err != nil {
			t.Fatal(err)
		}
		got = append(got, [2][]byte{id, body})
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	for i, row := range got {
		n := i + 1
		size := n % 97
		if n%500 == 0 {
			size = 20000
		}
		want := strings.Repeat(string([]byte{byte(n % 256)}), size)
		if string(row[0]) != string([]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}) || string(row[1]) != want {
			t.Fatalf("row %d changed after later rows were scanned", n)
		}
		if cap(row[0]) != len(row[0]) || cap(row[1]) != len(row[1]) {
			t.Fatalf("row %d: a value's capacity is past its length", n)
		}
	}
}
