package backup

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/store/postgres"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
	"github.com/jackc/pgx/v5"
)

// BenchmarkExport exports an owner of 50,000 messages of about 1 KiB, in
// process, on each engine: the store's reads, the rules and the container,
// without the transport. tools/archivebench measures the same over gRPC
// at 1,000,000 messages beside COPY.
func BenchmarkExport(b *testing.B) {
	const n = 50_000
	body := []byte(strings.Repeat("x", 1024))
	for _, e := range enginetest.Engines() {
		b.Run(e.Name, func(b *testing.B) {
			s := e.Open(b)
			owner := benchOwner(b, s, n, body)
			b.SetBytes(int64(n * (len(body) + 64)))
			for b.Loop() {
				counts, err := Export(b.Context(), s, owner, key, nil, exportAt, io.Discard, ExportConfig{})
				if err != nil || counts.Messages != n {
					b.Fatal(counts, err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkImport imports an archive of 20,000 messages of about 1 KiB
// into a fresh owner per op, in process, on each engine.
func BenchmarkImport(b *testing.B) {
	const n = 20_000
	body := []byte(strings.Repeat("x", 1024))
	for _, e := range enginetest.Engines() {
		b.Run(e.Name, func(b *testing.B) {
			s := e.Open(b)
			owner := benchOwner(b, s, n, body)
			var archiveBytes bytes.Buffer
			if _, err := Export(b.Context(), s, owner, key, nil, exportAt, &archiveBytes, ExportConfig{}); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(archiveBytes.Len()))
			i := 0
			for b.Loop() {
				i++
				res, err := Import(b.Context(), s, fmt.Sprintf("%s-%d", owner, i), key, bytes.NewReader(archiveBytes.Bytes()), ImportOptions{})
				if err != nil || res.Messages.Inserted != n {
					b.Fatal(res, err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// benchOwner stores n messages with the given content in one group of a
// new owner, and returns the owner.
func benchOwner(b *testing.B, s store.Store, n int, body []byte) string {
	owner := storetest.Owner("bench")
	if _, err := s.PutGroup(b.Context(), owner, storetest.MinimalGroup("g")); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i += 10_000 {
		msgs := storetest.Messages(fmt.Sprintf("b%d", i), storetest.GroupID("g"), 10_000, int64(i))
		for _, m := range msgs {
			m.DecryptedMessageBytes = body
		}
		if _, err := s.AppendMessages(b.Context(), owner, msgs, store.AppendOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	return owner
}

// BenchmarkExportCopyTo is export's ceiling on Postgres: the same rows of
// the same owner, in export order, out by COPY TO STDOUT (binary), read
// and discarded.
func BenchmarkExportCopyTo(b *testing.B) {
	const n = 50_000
	body := []byte(strings.Repeat("x", 1024))
	s := enginetest.Postgres(b).(*postgres.Store)
	owner := benchOwner(b, s, n, body)
	conn, err := s.Pool().Acquire(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	query := fmt.Sprintf(`COPY (SELECT %s FROM messages WHERE owner = '%s' ORDER BY group_id, sent_at_ns, id) TO STDOUT (FORMAT binary)`,
		store.MessageColumns, owner)
	b.SetBytes(int64(n * (len(body) + 64)))
	for b.Loop() {
		if _, err := conn.Conn().PgConn().CopyTo(b.Context(), io.Discard, query); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkImportCopyFrom is import's ceiling on Postgres: the same
// messages into a fresh owner's group by COPY FROM STDIN, one per op.
func BenchmarkImportCopyFrom(b *testing.B) {
	const n = 20_000
	body := []byte(strings.Repeat("x", 1024))
	s := enginetest.Postgres(b).(*postgres.Store)
	columns := append([]string{"owner"}, strings.Split(strings.NewReplacer(" ", "", "\n", "", "\t", "").Replace(store.MessageInsertColumns), ",")...)
	i := 0
	for b.Loop() {
		i++
		owner := fmt.Sprintf("%s-%d", storetest.Owner("copy"), i)
		if _, err := s.PutGroup(b.Context(), owner, storetest.MinimalGroup("g")); err != nil {
			b.Fatal(err)
		}
		msgs := storetest.Messages("c", storetest.GroupID("g"), n, 0)
		rows := make([][]any, len(msgs))
		for j, m := range msgs {
			m.DecryptedMessageBytes = body
			rows[j] = append([]any{owner}, store.MessageInsertArgs(m, true, 1)...)
		}
		if _, err := s.Pool().CopyFrom(b.Context(), pgx.Identifier{"messages"}, columns, pgx.CopyFromRows(rows)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
