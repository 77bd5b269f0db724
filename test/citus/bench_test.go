//go:build citus

package citus

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/backup"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/postgres"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// PlainURLEnv names a plain Postgres server's admin URL (make
// bench-citus: scripts/ensure-postgres.sh's) for the side-by-side
// benchmarks: the same operations on one Postgres and on the cluster,
// in one run, on one machine.
const PlainURLEnv = "TEST_PLAIN_DATABASE_URL"

// plainDatabase makes a database on the plain server for b.
func plainDatabase(b *testing.B) string {
	b.Helper()
	admin := os.Getenv(PlainURLEnv)
	if admin == "" {
		b.Fatalf("%s is not set: make bench-citus sets it", PlainURLEnv)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	name := fmt.Sprintf("citusbench_%d", os.Getpid())
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		b.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		c, err := pgx.Connect(ctx, admin)
		if err == nil {
			_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(ctx)
		}
	})
	u, _ := url.Parse(admin)
	u.Path = "/" + name
	return u.String()
}

var benchKey = bytes.Repeat([]byte{0x42}, 32)

// BenchmarkBeside: appends of 1,000 messages, a ListMessages page of
// 1,000, an export of an owner of 20,000 messages and its import into a
// new owner, on plain Postgres and on the cluster (coordinator and two
// workers on this machine), sub-benchmarks side by side in msgs/s.
func BenchmarkBeside(b *testing.B) {
	for _, engine := range []string{"postgres", "citus"} {
		b.Run(engine, func(b *testing.B) {
			var dbURL string
			if engine == "postgres" {
				dbURL = plainDatabase(b)
			} else {
				dbURL = storetest.NewPostgresDatabase(b)
			}
			st, err := postgres.Open(context.Background(), dbURL, postgres.Options{Migrate: true})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { st.Close() })
			benchEngine(b, st)
		})
	}
}

func benchEngine(b *testing.B, st *postgres.Store) {
	ctx := context.Background()
	const owner, page, size = "bench-owner", 1000, 20_000
	group := storetest.MinimalGroup("bench")
	if _, err := st.PutGroup(ctx, owner, group); err != nil {
		b.Fatal(err)
	}
	batch := func(prefix string, n int) []*mb.GroupMessageSave {
		msgs := make([]*mb.GroupMessageSave, n)
		for i := range msgs {
			msgs[i] = storetest.Message(fmt.Sprintf("%s-%d", prefix, i), group.Id, int64(i))
			msgs[i].DecryptedMessageBytes = bytes.Repeat([]byte("m"), 200)
		}
		return msgs
	}
	for i := range size / page {
		if _, err := st.AppendMessages(ctx, owner, batch(fmt.Sprint("base", i), page), store.AppendOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := st.PutGroup(ctx, "append-owner", group); err != nil {
		b.Fatal(err)
	}
	b.Run("AppendMessages", func(b *testing.B) {
		for i := range b.N {
			msgs := batch(fmt.Sprint("a", i), page)
			if _, err := st.AppendMessages(ctx, "append-owner", msgs, store.AppendOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*page)/b.Elapsed().Seconds(), "msgs/s")
	})
	// A service's append: one message a call (200 calls an iteration, so
	// -benchtime 10x measures 2,000), one phase on Citus (appendCitus).
	b.Run("AppendOne", func(b *testing.B) {
		const calls = 200
		for i := range b.N {
			for c := range calls {
				if _, err := st.AppendMessages(ctx, "append-owner", batch(fmt.Sprint("one", i, "-", c), 1), store.AppendOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.N*calls)/b.Elapsed().Seconds(), "msgs/s")
	})
	b.Run("ListMessages", func(b *testing.B) {
		for range b.N {
			p, err := st.ListMessages(ctx, owner, store.MessageQuery{GroupID: group.Id, Limit: page})
			if err != nil || len(p.Messages) != page {
				b.Fatalf("%d messages, %v", len(p.Messages), err)
			}
		}
		b.ReportMetric(float64(b.N*page)/b.Elapsed().Seconds(), "msgs/s")
	})
	var archive bytes.Buffer
	b.Run("Export", func(b *testing.B) {
		for range b.N {
			archive.Reset()
			if _, err := backup.Export(ctx, st, owner, benchKey, nil, 1_700_000_000_000_000_000, &archive, backup.ExportConfig{}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "msgs/s")
	})
	b.Run("Import", func(b *testing.B) {
		for i := range b.N {
			into := fmt.Sprint("import-owner-", i)
			// The group live first, so that the messages go in (ARCH-014).
			if _, err := st.PutGroup(ctx, into, group); err != nil {
				b.Fatal(err)
			}
			if _, err := backup.Import(ctx, st, into, benchKey, bytes.NewReader(archive.Bytes()), backup.ImportOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "msgs/s")
	})
}
