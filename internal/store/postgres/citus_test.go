package postgres_test

import (
	"context"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/postgres"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
	"github.com/contentbackup/contentbackup/migrations"
)

// planRecorder keeps, for each connection, the statement it runs, and the
// statements during which Citus said it was about to run a multi-shard
// (multi-task) plan.
type planRecorder struct {
	mu      sync.Mutex
	current map[*pgconn.PgConn]string
	all     map[string]bool
	multi   map[string]bool
	// inTx is each connection's statements since its last BEGIN, and
	// twoPhase the transactions Citus committed in two phases (a
	// PREPARE TRANSACTION it sent a worker), by their statements.
	inTx     map[*pgconn.PgConn][]string
	twoPhase map[string]bool
}

func (r *planRecorder) TraceQueryStart(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	flat := strings.Join(strings.Fields(d.SQL), " ")
	r.current[c.PgConn()], r.all[flat] = flat, true
	if strings.HasPrefix(strings.ToLower(flat), "begin") {
		r.inTx[c.PgConn()] = nil
	} else {
		r.inTx[c.PgConn()] = append(r.inTx[c.PgConn()], flat)
	}
	r.mu.Unlock()
	return ctx
}

func (r *planRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *planRecorder) TraceCopyFromStart(ctx context.Context, c *pgx.Conn, d pgx.TraceCopyFromStartData) context.Context {
	r.mu.Lock()
	r.current[c.PgConn()] = "COPY " + d.TableName.Sanitize()
	r.inTx[c.PgConn()] = append(r.inTx[c.PgConn()], r.current[c.PgConn()])
	r.mu.Unlock()
	return ctx
}

func (r *planRecorder) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

func (r *planRecorder) notice(c *pgconn.PgConn, n *pgconn.Notice) {
	if strings.Contains(n.Message, "PREPARE TRANSACTION") {
		r.mu.Lock()
		r.twoPhase[strings.Join(r.inTx[c], "; ")] = true
		r.mu.Unlock()
		return
	}
	if !strings.Contains(n.Message, "multi-task query about to be executed") {
		return
	}
	r.mu.Lock()
	r.multi[r.current[c]] = true
	r.mu.Unlock()
}

// citusFleetWide are the statements on owner tables that read across
// owners by design, each bounded: the expiry purge's and the KEK check's.
// On Citus each runs on every shard; every other statement on an owner
// table routes to the one shard holding its owner.
var citusFleetWide = map[string]string{
	"SELECT DISTINCT owner FROM messages WHERE owner > $1 AND expires_at_ns <= $2 ORDER BY owner LIMIT $3":                                                                                     "the purge finds its next owners, a page at a time (LIMIT)",
	"SELECT 1 FROM messages WHERE expires_at_ns <= $1 LIMIT 1":                                                                                                                                 "the purge's first look, anything due at all: one entry of each shard's due index",
	"SELECT min(expires_at_ns) FROM messages WHERE expires_at_ns <= $1":                                                                                                                        "the purge's lag, on the expiry index of each shard",
	"SELECT DISTINCT kek_fingerprint FROM backups WHERE owner_key_id = '' ORDER BY kek_fingerprint LIMIT 64":                                                                                   "the KEK check at start: at most 64 fingerprints, on the kek_fingerprint index",
	"SELECT wrapped_key FROM backups WHERE owner_key_id = '' AND kek_fingerprint = $1 LIMIT 1":                                                                                                 "the KEK check at start: one sample of each fingerprint",
	`SELECT kek_fingerprint, count(*) FROM backups WHERE owner_key_id = '' AND wrapped_key <> $1 GROUP BY kek_fingerprint`:                                                                     "the key status: legacy rows by KEK, on the backups_by_owner_key index",
	"SELECT min(kek_fingerprint) FROM owner_keys WHERE kek_fingerprint > $1":                                                                                                                   "the KEK check at start: the next fingerprint of owner keys, a descent of owner_keys_by_kek each",
	"SELECT kek_fingerprint, count(*) FROM owner_keys WHERE wrapped_key <> $1 GROUP BY kek_fingerprint":                                                                                        "GetKeyStatus and the KEK check at start: owner keys by KEK, one row an owner, on demand",
	"SELECT kek_fingerprint, count(*) FROM owner_keys WHERE (kek_fingerprint < $1 OR kek_fingerprint > $2) AND wrapped_key <> $3 GROUP BY kek_fingerprint":                                     "the key worker's status: the owner keys left to rewrap by KEK, on owner_keys_by_kek either side of the current KEK",
	"SELECT owner, key_id, wrapped_key, kek_fingerprint, created_ns, rewrapped_ns FROM owner_keys WHERE (kek_fingerprint < $1 OR kek_fingerprint > $2) AND owner > $3 ORDER BY owner LIMIT $4": "a KEK rotation pages through the owner keys left to rewrap (LIMIT), on owner_keys_by_kek either side of the current KEK; each rewrap names its owner",
	`SELECT owner, id, state, label, bucket, object_key, job_id, schedule, principal, options, wrapped_key, groups, messages, consent, length, sha256, exported_at_ns, created_ns, completed_ns, verified_ns, verify_problem, base_id, change_seq, kek_fingerprint, owner_key_id FROM backups WHERE owner_key_id = '' AND wrapped_key <> $1 AND (owner > $2 OR (owner = $3 AND id > $4)) ORDER BY owner, id LIMIT $5`: "the owner-key migration pages through legacy rows (LIMIT); each reseal names its owner",
}

var ownerTableRef = regexp.MustCompile(`(?i)\b(?:from|into|update|join)\s+(` + strings.Join(migrations.OwnerTables, "|") + `)\b`)

// TestCitusRouterPlans: the whole conformance suite on a real Citus
// cluster (make citus), with Citus told to report every statement it
// splits over shards (citus.multi_task_query_log_level): a statement on an
// owner table that does not name its owner, and so is not routed to one
// shard, fails it unless citusFleetWide names it. Citus also logs the
// commands it sends workers (citus.log_remote_commands): a transaction
// other than a migration or a bulk append that it commits in two phases
// fails it. It needs the cluster
// (TEST_CITUS_WORKERS); make test leaves it to make citus by name.
func TestCitusRouterPlans(t *testing.T) {
	if !storetest.Citus() {
		t.Fatalf("%s is not set: this test runs on a Citus cluster (make citus)", storetest.CitusWorkersEnv)
	}
	rec := &planRecorder{current: map[*pgconn.PgConn]string{}, all: map[string]bool{}, multi: map[string]bool{},
		inTx: map[*pgconn.PgConn][]string{}, twoPhase: map[string]bool{}}
	open := func(t testing.TB) store.Store {
		t.Helper()
		u, err := url.Parse(storetest.NewPostgresDatabase(t))
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("citus.multi_task_query_log_level", "notice")
		q.Set("citus.log_remote_commands", "on")
		u.RawQuery = q.Encode()
		s, err := postgres.Open(context.Background(), u.String(), postgres.Options{Migrate: true, Tracer: rec, OnNotice: rec.notice})
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
	var bad, fleet []string
	for sql := range rec.multi {
		if !ownerTableRef.MatchString(sql) {
			continue // the migrations' own statements, Citus's catalog
		}
		if _, ok := citusFleetWide[sql]; ok {
			fleet = append(fleet, sql)
			continue
		}
		bad = append(bad, sql)
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Errorf("Citus runs this statement on an owner table over every shard: it does not name its owner:\n\t%s", b)
	}
	var prepared []string
	for tx := range rec.twoPhase {
		prepared = append(prepared, tx)
	}
	sort.Strings(prepared)
	for _, tx := range prepared {
		if strings.Contains(tx, "goose_db_version") || strings.Contains(tx, "create_distributed_table") {
			continue // a migration
		}
		if strings.Contains(tx, `COPY "messages"`) {
			continue // a bulk append, by design (appendCitus says why)
		}
		t.Errorf("Citus committed this transaction in two phases: a worker stopped between its PREPARE and COMMIT keeps the owner's locks until recovery, a minute later (see appendCitus):\n\t%.600s", tx)
	}
	checked := 0
	for sql := range rec.all {
		if ownerTableRef.MatchString(sql) {
			checked++
		}
	}
	if checked < 40 {
		t.Errorf("only %d statements on owner tables were recorded: the tracer saw too little", checked)
	}
	t.Logf("%d distinct statements on owner tables: %d routed to one shard, %d fleet-wide by design, %d over every shard by mistake", checked, checked-len(fleet)-len(bad), len(fleet), len(bad))
}
