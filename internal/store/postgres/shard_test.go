package postgres_test

import (
	"context"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/postgres"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
	"github.com/contentbackup/contentbackup/migrations"
)

// recorder is a pgx tracer that keeps every statement the store sends.
type recorder struct {
	mu    sync.Mutex
	sql   map[string]bool
	copys map[string][]string
}

func (r *recorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	r.sql[d.SQL] = true
	r.mu.Unlock()
	return ctx
}

func (r *recorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *recorder) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceCopyFromStartData) context.Context {
	r.mu.Lock()
	r.copys[d.TableName.Sanitize()] = d.ColumnNames
	r.mu.Unlock()
	return ctx
}

func (r *recorder) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

// ownerTables are the tables keyed by owner: a sharded deployment (Citus,
// distributed by owner) routes each statement on them by its owner.
var ownerTables = migrations.OwnerTables

var (
	tableRef = regexp.MustCompile(`(?i)\b(?:from|into|update|join)\s+(` + strings.Join(migrations.OwnerTables, "|") + `)\b`)
	// ownerFilter: the owner bound in the WHERE clause, the distribution
	// column a router needs.
	ownerFilter = regexp.MustCompile(`(?i)\bwhere\b[^;]*\b(?:\w+\.)?owner\s*=\s*\$\d+`)
	insertOwner = regexp.MustCompile(`(?i)^\s*insert\s+into\s+\w+(?:\s+as\s+\w+)?\s*\(\s*owner\b`)
)

// fleetWide are the statements that read across owners by design, each
// with why: the expiry purge's, which a sharded deployment runs as
// multi-shard reads (Citus runs a SELECT on every shard); every write
// still names its owner.
var fleetWide = map[string]string{
	"SELECT DISTINCT owner FROM messages WHERE owner > $1 AND expires_at_ns <= $2 ORDER BY owner LIMIT $3":                                                                                     "the purge finds the next owners holding expired messages, in owner order",
	"SELECT 1 FROM messages WHERE expires_at_ns <= $1 LIMIT 1":                                                                                                                                 "the purge's first look: is any message due at all, from the head of messages_due",
	"SELECT min(expires_at_ns) FROM messages WHERE expires_at_ns <= $1":                                                                                                                        "the purge's lag: the oldest expired message left, whoever's",
	"UPDATE holds SET hold_id = md5(owner || '/' || backup_id) WHERE hold_id = '';":                                                                                                            "a migration (00019): each hold of the schema before gets its id, once, before the tables are distributed",
	"SELECT DISTINCT kek_fingerprint FROM backups WHERE owner_key_id = '' ORDER BY kek_fingerprint LIMIT 64":                                                                                   "the KEK check at start: the fingerprints the catalog is wrapped under",
	"SELECT wrapped_key FROM backups WHERE owner_key_id = '' AND kek_fingerprint = $1 LIMIT 1":                                                                                                 "the KEK check at start: one sample of each",
	`SELECT kek_fingerprint, count(*) FROM backups WHERE owner_key_id = '' AND wrapped_key <> $1 GROUP BY kek_fingerprint`:                                                                     "the key status: legacy rows by KEK, on the backups_by_owner_key index",
	"SELECT min(kek_fingerprint) FROM owner_keys WHERE kek_fingerprint > $1":                                                                                                                   "the KEK check at start: the next fingerprint of owner keys, a descent of owner_keys_by_kek each",
	"SELECT kek_fingerprint, count(*) FROM owner_keys WHERE wrapped_key <> $1 GROUP BY kek_fingerprint":                                                                                        "GetKeyStatus and the KEK check at start: owner keys by KEK, one row an owner, on demand",
	"SELECT kek_fingerprint, count(*) FROM owner_keys WHERE (kek_fingerprint < $1 OR kek_fingerprint > $2) AND wrapped_key <> $3 GROUP BY kek_fingerprint":                                     "the key worker's status: the owner keys left to rewrap by KEK, on owner_keys_by_kek either side of the current KEK",
	"SELECT owner, key_id, wrapped_key, kek_fingerprint, created_ns, rewrapped_ns FROM owner_keys WHERE (kek_fingerprint < $1 OR kek_fingerprint > $2) AND owner > $3 ORDER BY owner LIMIT $4": "a KEK rotation pages through the owner keys left to rewrap (LIMIT), on owner_keys_by_kek either side of the current KEK; each rewrap names its owner",
	`SELECT owner, id, state, label, bucket, object_key, job_id, schedule, principal, options, wrapped_key, groups, messages, consent, length, sha256, exported_at_ns, created_ns, completed_ns, verified_ns, verify_problem, base_id, change_seq, kek_fingerprint, owner_key_id FROM backups WHERE owner_key_id = '' AND wrapped_key <> $1 AND (owner > $2 OR (owner = $3 AND id > $4)) ORDER BY owner, id LIMIT $5`: "the owner-key migration pages through legacy rows (LIMIT); each reseal names its owner",
}

// TestStatementsLeadWithOwner: every statement the whole conformance
// suite sends to Postgres that touches an owner's table names the owner:
// a WHERE owner = $n, or owner as an insert's first column (COPY
// included). Statements on the server's own tables (jobs, store_probe,
// the migrations') are not the owner's and are left out.
func TestStatementsLeadWithOwner(t *testing.T) {
	rec := &recorder{sql: map[string]bool{}, copys: map[string][]string{}}
	open := func(t testing.TB) store.Store {
		t.Helper()
		s, err := postgres.Open(context.Background(), storetest.NewPostgresDatabase(t), postgres.Options{Migrate: true, Tracer: rec})
		if err != nil {
			t.Fatalf("open postgres store: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	storetest.Run(t, open)
	if t.Failed() {
		return
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var bad []string
	checked := 0
	for sql := range rec.sql {
		flat := strings.Join(strings.Fields(sql), " ")
		if !tableRef.MatchString(flat) || strings.Contains(flat, "goose_db_version") {
			continue
		}
		checked++
		if _, ok := fleetWide[flat]; ok || insertOwner.MatchString(flat) || ownerFilter.MatchString(flat) {
			continue
		}
		bad = append(bad, flat)
	}
	for table, cols := range rec.copys {
		checked++
		if len(cols) == 0 || cols[0] != "owner" {
			bad = append(bad, "COPY "+table+" "+strings.Join(cols, ","))
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Errorf("a statement on an owner's table (%v) does not name the owner first:\n\t%.300s", ownerTables, b)
	}
	if checked < 20 {
		t.Errorf("only %d statements on owner tables were recorded: the tracer saw too little", checked)
	}
	t.Logf("%d distinct statements on owner tables, %d without the owner", checked, len(bad))
}
