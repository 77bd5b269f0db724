// Command fleetbench measures whether a server costs the same as its
// fleet grows (issue 52): it builds two stores of the same engine, one of
// -small owners and one of -large, from a template owner written through
// the API (a group, five messages of which one disappears in 2100, a
// consent record, and a backup job's owner key and catalog row) and
// copied in SQL (INSERT ... SELECT over every column, owner renamed),
// checks seeded owners read back through the API as the template does,
// runs a server on each side by side, and prints the large/small ratios
// of append, list, export (alternating between the two servers), idle
// CPU and RSS over the same minute, and start-up.
//
// By hand: make bench-fleet (FLEET_ENGINE, FLEET_SMALL, FLEET_LARGE).
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	"github.com/contentbackup/contentbackup/internal/store/sqlite"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
	"github.com/contentbackup/contentbackup/tools/internal/scratchdb"
)

const template = "template"

// copied are the owner tables a seeded owner gets the template's rows
// of: every one but those keyed by a global id (jobs) or empty in the
// template (ticks, holds, tombstones).
var copied = []string{"groups", "messages", "consent", "owner_changes", "backups", "owner_keys"}

func main() {
	engine := flag.String("engine", "postgres", "postgres or sqlite")
	small := flag.Int("small", 10_000, "owners of the small store")
	large := flag.Int("large", 100_000, "owners of the large store")
	rounds := flag.Int("rounds", 200, "measurements of each call on each server")
	idle := flag.Duration("idle", time.Minute, "how long idle CPU is measured")
	admin := flag.String("database-url", os.Getenv("TEST_DATABASE_URL"), "PostgreSQL URL that may create databases (engine postgres)")
	workers := flag.String("citus-workers", os.Getenv("TEST_CITUS_WORKERS"), "host:port,... of the Citus workers when -database-url names a Citus coordinator")
	schedule := flag.Bool("schedule", true, "run every owner under a yearly schedule (its next firing outside the run)")
	flag.Parse()
	var citus []string
	if *workers != "" {
		citus = strings.Split(*workers, ",")
	}
	o := options{engine: *engine, small: *small, large: *large, rounds: *rounds, idle: *idle, admin: *admin, workers: citus, schedule: *schedule}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "fleetbench:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	engine               string
	small, large, rounds int
	idle                 time.Duration
	admin                string
	workers              []string // Citus workers, when admin is a coordinator
	schedule             bool
}

func run(o options) error {
	engine, small, large, rounds, idle, admin := o.engine, o.small, o.large, o.rounds, o.idle, o.admin
	work, err := os.MkdirTemp("", "fleetbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	bin := filepath.Join(work, "server")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/server").CombinedOutput(); err != nil {
		return fmt.Errorf("build: %v\n%s", err, out)
	}
	var sides []*side
	for _, owners := range []int{small, large} {
		s := &side{owners: owners, engine: engine, bin: bin, dir: filepath.Join(work, strconv.Itoa(owners)), citus: len(o.workers) > 0}
		if engine == "postgres" {
			if admin == "" {
				return errors.New("engine postgres needs -database-url or TEST_DATABASE_URL")
			}
			db, drop, err := scratchdb.New(context.Background(), admin, "fleet", o.workers...)
			if err != nil {
				return err
			}
			defer drop()
			s.db = db
		}
		start := time.Now()
		if err := s.seed(); err != nil {
			return fmt.Errorf("%d owners: %w", owners, err)
		}
		if o.schedule {
			if err := s.writeSchedule(); err != nil {
				return err
			}
		}
		size, err := s.size()
		if err != nil {
			return err
		}
		fmt.Printf("%s, %d owners: seeded in %s; the store holds %.1f MiB, %.0f bytes an owner\n",
			engine, owners, time.Since(start).Round(time.Second), float64(size)/(1<<20), float64(size)/float64(owners))
		sides = append(sides, s)
	}
	for _, s := range sides {
		if err := s.start(); err != nil {
			return err
		}
		defer s.stop()
	}
	// The calls, alternating between the two servers.
	calls := []string{"append", "list", "export", "job"}
	took := map[string][2][]time.Duration{}
	for r := range rounds {
		for _, call := range calls {
			for i, s := range sides {
				d, err := s.call(call, r)
				if err != nil {
					return fmt.Errorf("%s on %d owners: %w", call, s.owners, err)
				}
				t := took[call]
				t[i] = append(t[i], d)
				took[call] = t
			}
		}
	}
	// Idle: both at once, no traffic.
	cpu0 := [2]float64{sides[0].cpu(), sides[1].cpu()}
	time.Sleep(idle)
	cpu := [2]float64{sides[0].cpu() - cpu0[0], sides[1].cpu() - cpu0[1]}
	rss := [2]float64{sides[0].rss(), sides[1].rss()}
	// Start-up: each restarted three times.
	var startup [2][]time.Duration
	for range 3 {
		for i, s := range sides {
			s.stop()
			t := time.Now()
			if err := s.start(); err != nil {
				return err
			}
			startup[i] = append(startup[i], time.Since(t))
		}
	}
	fmt.Printf("\n%s: %d owners against %d (%d rounds, alternating)\n", engine, large, small, rounds)
	fmt.Printf("%-22s %14s %14s %8s\n", "", fmt.Sprint(small), fmt.Sprint(large), "ratio")
	for _, call := range calls {
		for _, q := range []struct {
			name string
			at   int
		}{{"median", 50}, {"p99", 99}} {
			a, b := pct(took[call][0], q.at), pct(took[call][1], q.at)
			fmt.Printf("%-22s %14s %14s %8.2f\n", call+" "+q.name, a, b, float64(b)/float64(a))
		}
	}
	fmt.Printf("%-22s %14.2f %14.2f %8.2f\n", fmt.Sprintf("idle CPU s per %s", idle), cpu[0], cpu[1], ratio(cpu[1], cpu[0]))
	fmt.Printf("%-22s %14.1f %14.1f %8.2f\n", "RSS MiB", rss[0]/(1<<20), rss[1]/(1<<20), ratio(rss[1], rss[0]))
	a, b := pct(startup[0], 50), pct(startup[1], 50)
	fmt.Printf("%-22s %14s %14s %8.2f\n", "start-up median", a, b, float64(b)/float64(a))
	return nil
}

// ratio is a/b; NaN (printed so) when b is nothing measurable.
func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

func pct(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[(len(s)-1)*p/100].Round(10 * time.Microsecond)
}

// side is one store and the server on it.
type side struct {
	owners      int
	schedule    string // the schedule policy file, every owner in it
	citus       bool
	engine, bin string
	dir, db     string
	cmd         *exec.Cmd
	addr, token string
	conn        *grpc.ClientConn
}

func (s *side) env() []string {
	env := append(os.Environ(), "LISTEN_ADDR=127.0.0.1:0", "HTTP_LISTEN_ADDR=", "METRICS_ADDR=", "LOG_FORMAT=json", "DATA_DIR="+s.dir)
	if s.schedule != "" {
		env = append(env, "SCHEDULE="+s.schedule)
	}
	if s.db != "" {
		env = append(env, "DATABASE_URL="+s.db)
	}
	return env
}

func (s *side) start() error {
	s.cmd = exec.Command(s.bin)
	s.cmd.Env = s.env()
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := s.cmd.Start(); err != nil {
		return err
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var e struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &e) == nil && e.Msg == "serving" {
				addr <- e.Addr
			}
		}
	}()
	select {
	case s.addr = <-addr:
	case <-time.After(5 * time.Minute):
		return errors.New("the server did not serve")
	}
	token, err := os.ReadFile(filepath.Join(s.dir, "dev-token"))
	if err != nil {
		return err
	}
	s.token = strings.TrimSpace(string(token))
	s.conn, err = grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	return err
}

func (s *side) stop() {
	if s.conn != nil {
		s.conn.Close()
	}
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(os.Interrupt)
		_ = s.cmd.Wait()
	}
	s.cmd = nil
}

func (s *side) ctx() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+s.token), cancel
}

// owner is a seeded owner, at random.
func (s *side) owner() string {
	n, _ := rand.Int(rand.Reader, big.NewInt(int64(s.owners)))
	return fmt.Sprintf("fleet-%08d", n.Int64()+1)
}

func (s *side) call(call string, round int) (time.Duration, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	owner := s.owner()
	conv := cb.NewConversationServiceClient(s.conn)
	start := time.Now()
	var err error
	switch call {
	case "append":
		_, err = conv.AppendMessages(ctx, &cb.AppendMessagesRequest{Owner: owner, Messages: storetest.Messages(fmt.Sprintf("bench-%d-", round), storetest.GroupID("g"), 10, int64(round)*10+100)})
	case "list":
		_, err = conv.ListMessages(ctx, &cb.ListMessagesRequest{Owner: owner, GroupId: storetest.GroupID("g"), PageSize: 50})
	case "job":
		// A backup job to the end: the seeded owner's key (the template's
		// row, copied) seals the new backup's data key for this owner.
		var op *longrunningpb.Operation
		op, err = cb.NewBackupServiceClient(s.conn).StartExport(ctx, &cb.StartExportRequest{Owner: owner, Bucket: "local", Label: "bench"})
		ops := longrunningpb.NewOperationsClient(s.conn)
		for err == nil && !op.GetDone() {
			op, err = ops.WaitOperation(ctx, &longrunningpb.WaitOperationRequest{Name: op.GetName(), Timeout: durationpb.New(5 * time.Second)})
		}
		if err == nil && op.GetError() != nil {
			err = fmt.Errorf("backup job of %s: %v", owner, op.GetError())
		}
	case "export":
		var stream grpc.ServerStreamingClient[cb.ExportResponse]
		stream, err = cb.NewArchiveServiceClient(s.conn).Export(ctx, &cb.ExportRequest{Owner: owner, Key: make([]byte, 32)})
		for err == nil {
			_, err = stream.Recv()
		}
		if errors.Is(err, io.EOF) {
			err = nil
		}
	}
	return time.Since(start), err
}

// cpu is the server's user and system CPU seconds so far.
func (s *side) cpu() float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	u, _ := strconv.ParseFloat(f[11], 64)
	k, _ := strconv.ParseFloat(f[12], 64)
	return (u + k) / 100 // USER_HZ
}

func (s *side) rss() float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.Fields(v)[0], 64)
			return kb * 1024
		}
	}
	return 0
}

// size is the store's bytes on disk: the database, or the SQLite files.
func (s *side) size() (int64, error) {
	if s.engine == "postgres" {
		ctx := context.Background()
		c, err := pgx.Connect(ctx, s.db)
		if err != nil {
			return 0, err
		}
		defer c.Close(ctx)
		// On Citus the rows live on the workers: the database on every
		// node, summed.
		q := "SELECT pg_database_size(current_database())"
		if s.citus {
			q = `SELECT pg_database_size(current_database()) + coalesce((SELECT sum(result::bigint) FROM run_command_on_workers('SELECT pg_database_size(current_database())')), 0)`
		}
		var n int64
		err = c.QueryRow(ctx, q).Scan(&n)
		return n, err
	}
	paths, err := filepath.Glob(filepath.Join(s.dir, sqlite.FileName+"*"))
	if err != nil {
		return 0, err
	}
	var n int64
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil {
			n += fi.Size()
		}
	}
	return n, nil
}

// seed writes the template through the API, stops the server, copies the
// template's rows to every seeded owner in SQL, and checks two seeded
// owners read back as the template does.
func (s *side) seed() error {
	if err := s.start(); err != nil {
		return err
	}
	if err := s.writeTemplate(); err != nil {
		s.stop()
		return err
	}
	s.stop()
	if err := s.copyTemplate(); err != nil {
		return err
	}
	if err := s.start(); err != nil {
		return err
	}
	defer s.stop()
	want, err := s.readBack(template)
	if err != nil {
		return err
	}
	for _, owner := range []string{"fleet-00000001", fmt.Sprintf("fleet-%08d", s.owners)} {
		got, err := s.readBack(owner)
		if err != nil {
			return err
		}
		if !proto.Equal(got, want) {
			return fmt.Errorf("seeded owner %s reads back other than the template: %v, want %v", owner, got, want)
		}
	}
	return nil
}

func (s *side) writeTemplate() error {
	ctx, cancel := s.ctx()
	defer cancel()
	conv := cb.NewConversationServiceClient(s.conn)
	if _, err := conv.PutGroup(ctx, &cb.PutGroupRequest{Owner: template, Group: storetest.FullGroup("g")}); err != nil {
		return err
	}
	msgs := storetest.Messages("m", storetest.GroupID("g"), 5, 1)
	expires := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	known := true
	msgs[4].ExpiresAtNs, msgs[4].ExpiryKnown = &expires, &known
	if _, err := conv.AppendMessages(ctx, &cb.AppendMessagesRequest{Owner: template, Messages: msgs}); err != nil {
		return err
	}
	if _, err := conv.SetConsent(ctx, &cb.SetConsentRequest{Owner: template, Records: []*cs.ConsentSave{storetest.Consent("peer", cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED, 1)}}); err != nil {
		return err
	}
	op, err := cb.NewBackupServiceClient(s.conn).StartExport(ctx, &cb.StartExportRequest{Owner: template, Bucket: "local", Label: "template"})
	ops := longrunningpb.NewOperationsClient(s.conn)
	for err == nil && !op.GetDone() {
		op, err = ops.WaitOperation(ctx, &longrunningpb.WaitOperationRequest{Name: op.GetName(), Timeout: durationpb.New(5 * time.Second)})
	}
	if err == nil && op.GetError() != nil {
		err = fmt.Errorf("the template's backup: %v", op.GetError())
	}
	return err
}

// writeSchedule puts every seeded owner under one schedule that fires
// once a year (1 January, 03:00 UTC), outside any run: the scheduler's
// steady state, its policy of every owner loaded, with nothing due.
func (s *side) writeSchedule() error {
	var b strings.Builder
	b.WriteString("schedules:\n  - name: fleet\n    cron: \"0 3 1 1 *\"\n    bucket: local\n    keep: 3\n    owners:\n")
	for i := 1; i <= s.owners; i++ {
		fmt.Fprintf(&b, "      - fleet-%08d\n", i)
	}
	s.schedule = filepath.Join(s.dir, "schedule.yaml")
	return os.WriteFile(s.schedule, []byte(b.String()), 0o600)
}

// readBack is what the API gives of owner: its groups, messages and
// consent, and its backups' sizes.
func (s *side) readBack(owner string) (*cb.ListMessagesResponse, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	return cb.NewConversationServiceClient(s.conn).ListMessages(ctx, &cb.ListMessagesRequest{Owner: owner, GroupId: storetest.GroupID("g"), PageSize: 100})
}

// copyTemplate copies the template's rows of each copied table to the
// seeded owners fleet-00000001 .. fleet-<owners>, in one statement a table.
func (s *side) copyTemplate() error {
	ctx := context.Background()
	switch s.engine {
	case "postgres":
		c, err := pgx.Connect(ctx, s.db)
		if err != nil {
			return err
		}
		defer c.Close(ctx)
		for _, t := range copied {
			cols, err := columnsPG(ctx, c, t)
			if err != nil {
				return err
			}
			q := fmt.Sprintf(`INSERT INTO %s (%s) SELECT %s FROM %s CROSS JOIN generate_series(1, %d) AS s(i) WHERE %s.owner = '%s'`,
				t, strings.Join(cols, ", "), renamed(cols, `'fleet-' || lpad(s.i::text, 8, '0')`, t), t, s.owners, t, template)
			if _, err := c.Exec(ctx, q); err != nil {
				return fmt.Errorf("%s: %w", t, err)
			}
		}
		_, err = c.Exec(ctx, "ANALYZE")
		return err
	default:
		st, err := sqlite.Open(ctx, s.dir, sqlite.Options{})
		if err != nil {
			return err
		}
		defer st.Close()
		db := st.DB()
		for _, t := range copied {
			cols, err := columnsSQLite(ctx, db, t)
			if err != nil {
				return err
			}
			q := fmt.Sprintf(`WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < %d) INSERT INTO %s (%s) SELECT %s FROM %s, s WHERE %s.owner = '%s'`,
				s.owners, t, strings.Join(cols, ", "), renamed(cols, `printf('fleet-%08d', s.i)`, t), t, t, template)
			if _, err := db.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("%s: %w", t, err)
			}
		}
		_, err = db.ExecContext(ctx, "ANALYZE")
		return err
	}
}

// renamed is the select list of cols from table, the owner column
// replaced by owner.
func renamed(cols []string, owner, table string) string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = table + "." + c
		if c == "owner" {
			out[i] = owner
		}
	}
	return strings.Join(out, ", ")
}

func columnsPG(ctx context.Context, c *pgx.Conn, table string) ([]string, error) {
	rows, err := c.Query(ctx, `SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1 AND is_generated = 'NEVER' ORDER BY ordinal_position`, table)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

func columnsSQLite(ctx context.Context, db *sql.DB, table string) ([]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT name FROM pragma_table_info(?)`, table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}
