// Command soak runs the built server on PostgreSQL under mixed load for a
// given duration and watches it for leaks and drift (issue 52): unary
// calls, exports read whole and cut mid-way, imports abandoned after
// their first chunk, a backup job and its restore every minute, HTTP/JSON
// calls (answered, refused without credentials, refused too large), and
// history uploads downloaded back. Every 30 s it samples the server's
// RSS, Go heap, goroutines, descriptors, database sessions, temporary
// files and the window's p99, and at the end prints each one's slope per
// 10 minutes after the warm-up, and fails on an INTERNAL or UNKNOWN, a
// failed job or a history file that did not come back whole.
//
// It stops by itself: make soak SOAK_DURATION=1h. Not in CI.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
	"github.com/contentbackup/contentbackup/tools/internal/scratchdb"
)

func main() {
	duration := flag.Duration("duration", 10*time.Minute, "how long the load runs")
	warmup := flag.Duration("warmup", 2*time.Minute, "samples before this are left out of the slopes")
	admin := flag.String("database-url", os.Getenv("TEST_DATABASE_URL"), "a PostgreSQL URL that may create databases")
	bin := flag.String("bin", "", "the server binary (default: built from ./cmd/server)")
	flag.Parse()
	if err := run(*duration, *warmup, *admin, *bin); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

func run(duration, warmup time.Duration, admin, bin string) error {
	if admin == "" {
		return errors.New("no database: set -database-url or TEST_DATABASE_URL (scripts/ensure-postgres.sh prints one)")
	}
	work, err := os.MkdirTemp("", "soak")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if bin == "" {
		bin = filepath.Join(work, "server")
		if out, err := exec.Command("go", "build", "-o", bin, "./cmd/server").CombinedOutput(); err != nil {
			return fmt.Errorf("build: %v\n%s", err, out)
		}
	}
	db, drop, err := scratchdb.New(context.Background(), admin, "soak")
	if err != nil {
		return err
	}
	defer drop()
	srv, err := startServer(bin, work, db)
	if err != nil {
		return err
	}
	defer srv.stop()

	conn, err := grpc.NewClient(srv.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	auth := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+srv.token)
	l := &load{conn: conn, srv: srv, codes: map[codes.Code]int{}}
	var wg sync.WaitGroup
	for _, f := range []func(context.Context){l.unary, l.unary, l.exports, l.abandonedImports, l.jobs, l.httpJSON, l.history} {
		wg.Go(func() { f(auth) })
	}
	samples := sampleEvery(ctx, 30*time.Second, srv, db, l)
	wg.Wait()
	return report(samples, warmup, l)
}

// server is the running binary and where it serves.
type server struct {
	cmd                          *exec.Cmd
	grpc, http, history, metrics string
	token, tmp                   string
	mu                           sync.Mutex
	logErrors                    int
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func startServer(bin, work, db string) (*server, error) {
	s := &server{tmp: filepath.Join(work, "tmp")}
	for _, a := range []*string{&s.grpc, &s.http, &s.history, &s.metrics} {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		*a = addr
	}
	if err := os.Mkdir(s.tmp, 0o700); err != nil {
		return nil, err
	}
	data := filepath.Join(work, "data")
	s.cmd = exec.Command(bin)
	s.cmd.Env = append(os.Environ(), "LISTEN_ADDR="+s.grpc, "HTTP_LISTEN_ADDR="+s.http, "HISTORY_LISTEN_ADDR="+s.history,
		"METRICS_ADDR="+s.metrics, "LOG_FORMAT=json", "DATA_DIR="+data, "DATABASE_URL="+db, "TMPDIR="+s.tmp,
		"MAX_RECV_BYTES=1048576", "STREAM_IDLE_TIMEOUT=5s")
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	serving := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		once := sync.Once{}
		for sc.Scan() {
			var e struct{ Level, Msg string }
			if json.Unmarshal(sc.Bytes(), &e) != nil {
				continue
			}
			if e.Msg == "serving" {
				once.Do(func() { close(serving) })
			}
			if e.Level == "error" || e.Level == "dpanic" || e.Level == "panic" || e.Level == "fatal" {
				s.mu.Lock()
				s.logErrors++
				s.mu.Unlock()
				fmt.Fprintf(os.Stderr, "server: %s\n", sc.Text())
			}
		}
	}()
	select {
	case <-serving:
	case <-time.After(60 * time.Second):
		s.stop()
		return nil, errors.New("the server did not serve within a minute")
	}
	token, err := os.ReadFile(filepath.Join(data, "dev-token"))
	if err != nil {
		s.stop()
		return nil, err
	}
	s.token = strings.TrimSpace(string(token))
	return s, nil
}

func (s *server) stop() {
	_ = s.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
	}
}

// load is the traffic and what it met.
type load struct {
	conn *grpc.ClientConn
	srv  *server

	mu           sync.Mutex
	latencies    []time.Duration // unary calls of the current window
	codes        map[codes.Code]int
	calls        int
	jobsDone     int
	jobsBad      []string
	historyFiles int
	historyBad   []string
	httpBad      []string
}

// note records a call's outcome; a caller's own cancel is not the
// server's error.
func (l *load) note(ctx context.Context, err error, took time.Duration, unary bool) {
	code := status.Code(err)
	if ctx.Err() != nil && (code == codes.Canceled || code == codes.DeadlineExceeded) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	l.codes[code]++
	if unary {
		l.latencies = append(l.latencies, took)
	}
}

func (l *load) unary(ctx context.Context) {
	owner := "unary-" + strings.ToLower(rand.Text()[:6])
	conv := cb.NewConversationServiceClient(l.conn)
	content := cb.NewContentServiceClient(l.conn)
	g := storetest.FullGroup("g")
	if _, err := conv.PutGroup(ctx, &cb.PutGroupRequest{Owner: owner, Group: g}); err != nil {
		l.note(ctx, err, 0, false)
		return
	}
	enc, err := content.Encode(ctx, &cb.EncodeRequest{Input: &cb.EncodeRequest_Content{Content: &cb.Content{Value: &cb.Content_Text{Text: "soak"}}}})
	if err != nil {
		l.note(ctx, err, 0, false)
		return
	}
	envelope, err := encodedBytes(enc)
	if err != nil {
		return
	}
	for i := int64(0); ctx.Err() == nil; i++ {
		start := time.Now()
		_, err := conv.AppendMessages(ctx, &cb.AppendMessagesRequest{Owner: owner, Messages: storetest.Messages(fmt.Sprintf("m%d-", i), g.GetId(), 10, i*10)})
		l.note(ctx, err, time.Since(start), true)
		start = time.Now()
		_, err = conv.ListMessages(ctx, &cb.ListMessagesRequest{Owner: owner, GroupId: g.GetId(), PageSize: 50})
		l.note(ctx, err, time.Since(start), true)
		start = time.Now()
		_, err = content.Decode(ctx, &cb.DecodeRequest{EncodedContent: envelope})
		l.note(ctx, err, time.Since(start), true)
		pause(ctx, 20*time.Millisecond)
	}
}

// encodedBytes is an Encode's envelope as Decode takes it.
func encodedBytes(r *cb.EncodeResponse) ([]byte, error) {
	if b := r.GetEncodedContent(); len(b) > 0 {
		return b, nil
	}
	return nil, errors.New("the Encode call returned no envelope")
}

func (l *load) exports(ctx context.Context) {
	owner := "exports"
	conv := cb.NewConversationServiceClient(l.conn)
	g := storetest.FullGroup("g")
	if _, err := conv.PutGroup(ctx, &cb.PutGroupRequest{Owner: owner, Group: g}); err != nil {
		l.note(ctx, err, 0, false)
		return
	}
	_, err := conv.AppendMessages(ctx, &cb.AppendMessagesRequest{Owner: owner, Messages: storetest.Messages("e", g.GetId(), 500, 0)})
	l.note(ctx, err, 0, false)
	arch := cb.NewArchiveServiceClient(l.conn)
	key := make([]byte, 32)
	for i := 0; ctx.Err() == nil; i++ {
		sctx, cancel := context.WithCancel(ctx)
		stream, err := arch.Export(sctx, &cb.ExportRequest{Owner: owner, Key: key})
		if err == nil {
			for {
				_, err = stream.Recv()
				if err != nil || i%2 == 1 { // every other one is cut after its first message
					break
				}
			}
			if errors.Is(err, io.EOF) {
				err = nil
			}
		}
		if i%2 == 1 {
			err = nil // the cut one's end is ours
		}
		cancel()
		l.note(ctx, err, 0, false)
		pause(ctx, 500*time.Millisecond)
	}
}

func (l *load) abandonedImports(ctx context.Context) {
	arch := cb.NewArchiveServiceClient(l.conn)
	junk := make([]byte, 64<<10)
	for ctx.Err() == nil {
		sctx, cancel := context.WithCancel(ctx)
		stream, err := arch.Import(sctx)
		if err == nil {
			_ = stream.Send(&cb.ImportRequest{Payload: &cb.ImportRequest_Start{Start: &cb.ImportStart{Owner: "abandoned", Key: make([]byte, 32)}}})
			_, _ = rand.Read(junk)
			_ = stream.Send(&cb.ImportRequest{Payload: &cb.ImportRequest_Chunk{Chunk: junk}})
		}
		cancel() // abandoned mid-upload
		pause(ctx, time.Second)
	}
}

// jobs runs a backup of one owner and its restore into another, once a
// minute.
func (l *load) jobs(ctx context.Context) {
	owner := "jobs"
	conv := cb.NewConversationServiceClient(l.conn)
	g := storetest.FullGroup("g")
	if _, err := conv.PutGroup(ctx, &cb.PutGroupRequest{Owner: owner, Group: g}); err != nil {
		l.note(ctx, err, 0, false)
		return
	}
	bs := cb.NewBackupServiceClient(l.conn)
	for i := 0; ctx.Err() == nil; i++ {
		_, _ = conv.AppendMessages(ctx, &cb.AppendMessagesRequest{Owner: owner, Messages: storetest.Messages(fmt.Sprintf("j%d-", i), g.GetId(), 100, int64(i)*100)})
		op, err := bs.StartExport(ctx, &cb.StartExportRequest{Owner: owner, Bucket: "local", Label: fmt.Sprintf("soak-%d", i)})
		if done, ok := l.waitJob(ctx, op, err, "backup"); ok {
			result := &cb.ExportJobResult{}
			if err := done.GetResponse().UnmarshalTo(result); err == nil {
				op, err := bs.StartImport(ctx, &cb.StartImportRequest{Owner: fmt.Sprintf("restored-%d", i), SourceOwner: owner, Backup: result.GetBackup()})
				l.waitJob(ctx, op, err, "restore")
			}
		}
		pause(ctx, time.Minute)
	}
}

func (l *load) waitJob(ctx context.Context, op *longrunningpb.Operation, err error, what string) (*longrunningpb.Operation, bool) {
	ops := longrunningpb.NewOperationsClient(l.conn)
	for err == nil && !op.GetDone() && ctx.Err() == nil {
		op, err = ops.WaitOperation(ctx, &longrunningpb.WaitOperationRequest{Name: op.GetName(), Timeout: durationpb.New(5 * time.Second)})
	}
	if ctx.Err() != nil {
		return nil, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err != nil:
		l.jobsBad = append(l.jobsBad, fmt.Sprintf("%s: %v", what, err))
	case op.GetError() != nil:
		l.jobsBad = append(l.jobsBad, fmt.Sprintf("%s: %v", what, op.GetError()))
	default:
		l.jobsDone++
		return op, true
	}
	return nil, false
}

// httpJSON calls the HTTP/JSON listener: an answered call, one without
// credentials and one past the body limit, each with the status it
// must get.
func (l *load) httpJSON(ctx context.Context) {
	big := bytes.Repeat([]byte(" "), 2<<20)
	path := "http://" + l.srv.http + cb.ContentService_Encode_FullMethodName
	body := []byte(`{"content":{"text":"soak"}}`)
	for ctx.Err() == nil {
		for _, c := range []struct {
			token string
			body  []byte
			want  int
		}{{l.srv.token, body, http.StatusOK}, {"", body, http.StatusUnauthorized}, {l.srv.token, append(body, big...), http.StatusRequestEntityTooLarge}} {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, path, bytes.NewReader(c.body))
			req.Header.Set("Content-Type", "application/json")
			if c.token != "" {
				req.Header.Set("Authorization", "Bearer "+c.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if ctx.Err() != nil {
				return
			}
			got := 0
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				got = resp.StatusCode
			}
			if got != c.want {
				l.mu.Lock()
				l.httpBad = append(l.httpBad, fmt.Sprintf("HTTP/JSON: %d (%v), want %d", got, err, c.want))
				l.mu.Unlock()
			}
		}
		pause(ctx, 200*time.Millisecond)
	}
}

// history uploads a file to the history server and downloads it back.
func (l *load) history(ctx context.Context) {
	base := "http://" + l.srv.history
	for ctx.Err() == nil {
		body := make([]byte, 256<<10)
		_, _ = rand.Read(body)
		problem := func() string {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/upload", bytes.NewReader(body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err.Error()
			}
			id, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return "upload: " + resp.Status
			}
			req, _ = http.NewRequestWithContext(ctx, http.MethodGet, base+"/files/"+string(id), nil)
			resp, err = http.DefaultClient.Do(req)
			if err != nil {
				return err.Error()
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !bytes.Equal(got, body) {
				return fmt.Sprintf("download: %s, %d bytes of %d", resp.Status, len(got), len(body))
			}
			return ""
		}()
		if ctx.Err() != nil {
			return
		}
		l.mu.Lock()
		l.historyFiles++
		if problem != "" {
			l.historyBad = append(l.historyBad, problem)
		}
		l.mu.Unlock()
		// One address's share: the history server admits 6 uploads a
		// minute from one (history.DefaultUploadsPerMinute).
		pause(ctx, 11*time.Second)
	}
}

func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// sample is one look at the server.
type sample struct {
	at                                               time.Duration
	rss, anon, heap, goroutines, fds, sessions, tmps float64
	p99                                              time.Duration
	calls                                            int
}

// series names the sampled figures, in the report's order.
var series = []struct {
	name string
	of   func(sample) float64
}{
	{"RSS MiB", func(s sample) float64 { return s.rss / (1 << 20) }},
	// The anonymous part: RSS less the binary's pages, which the kernel
	// maps in as code paths first run (growth there is not a leak).
	{"anon MiB", func(s sample) float64 { return s.anon / (1 << 20) }},
	{"heap MiB", func(s sample) float64 { return s.heap / (1 << 20) }},
	{"goroutines", func(s sample) float64 { return s.goroutines }},
	{"descriptors", func(s sample) float64 { return s.fds }},
	{"db sessions", func(s sample) float64 { return s.sessions }},
	{"temp files", func(s sample) float64 { return s.tmps }},
	{"p99 ms", func(s sample) float64 { return float64(s.p99) / float64(time.Millisecond) }},
}

// sampleEvery samples the server every period until ctx ends, printing
// each sample as it comes.
func sampleEvery(ctx context.Context, period time.Duration, srv *server, db string, l *load) []sample {
	start := time.Now()
	fmt.Printf("%8s", "t")
	for _, s := range series {
		fmt.Printf(" %12s", s.name)
	}
	fmt.Printf(" %8s\n", "calls")
	var out []sample
	for {
		select {
		case <-ctx.Done():
			return out
		case <-time.After(period):
		}
		s := sample{at: time.Since(start)}
		s.rss = procStatus(srv.cmd.Process.Pid, "VmRSS") * 1024
		s.anon = procStatus(srv.cmd.Process.Pid, "RssAnon") * 1024
		m := scrape("http://" + srv.metrics + "/metrics")
		s.heap, s.goroutines, s.fds = m["go_memstats_heap_inuse_bytes"], m["go_goroutines"], m["process_open_fds"]
		s.sessions = sessions(db)
		if entries, err := os.ReadDir(srv.tmp); err == nil {
			s.tmps = float64(len(entries))
		}
		l.mu.Lock()
		lat := l.latencies
		l.latencies = nil
		s.calls = l.calls
		l.mu.Unlock()
		if len(lat) > 0 {
			slices.Sort(lat)
			s.p99 = lat[len(lat)*99/100]
		}
		out = append(out, s)
		fmt.Printf("%8s", s.at.Round(time.Second))
		for _, se := range series {
			fmt.Printf(" %12.1f", se.of(s))
		}
		fmt.Printf(" %8d\n", s.calls)
	}
}

func procStatus(pid int, field string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f, _ := strconv.ParseFloat(strings.Fields(v)[0], 64)
			return f
		}
	}
	return 0
}

// scrape reads the unlabelled series of a Prometheus text page.
func scrape(u string) map[string]float64 {
	out := map[string]float64{}
	resp, err := http.Get(u)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && !strings.HasPrefix(f[0], "#") {
			if v, err := strconv.ParseFloat(f[1], 64); err == nil {
				out[f[0]] = v
			}
		}
	}
	return out
}

// sessions counts the server's sessions on its database.
func sessions(db string) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, db)
	if err != nil {
		return -1
	}
	defer c.Close(ctx)
	var n float64
	// Every session on the database but this one.
	if err := c.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
		return -1
	}
	return n
}

// slope is the least-squares slope of ys over xs.
func slope(xs, ys []float64) float64 {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx, sy, sxx, sxy = sx+xs[i], sy+ys[i], sxx+xs[i]*xs[i], sxy+xs[i]*ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

// report prints each series' slope per 10 minutes after the warm-up, and
// what went wrong; it fails on a server error, a failed job, a history
// file not returned whole or an HTTP/JSON answer not as it must be.
func report(samples []sample, warmup time.Duration, l *load) error {
	var xs []float64
	var kept []sample
	for _, s := range samples {
		if s.at >= warmup {
			xs = append(xs, s.at.Minutes()/10)
			kept = append(kept, s)
		}
	}
	fmt.Printf("\nafter %s of warm-up, %d samples: slope per 10 minutes (and the range)\n", warmup, len(kept))
	for _, se := range series {
		var ys []float64
		for _, s := range kept {
			ys = append(ys, se.of(s))
		}
		if len(ys) < 2 {
			fmt.Printf("  %-12s too few samples\n", se.name)
			continue
		}
		fmt.Printf("  %-12s %+10.2f   (%.1f .. %.1f)\n", se.name, slope(xs, ys), slices.Min(ys), slices.Max(ys))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var keys []string
	for c, n := range l.codes {
		keys = append(keys, fmt.Sprintf("%s %d", c, n))
	}
	slices.Sort(keys)
	fmt.Printf("calls: %d (%s); jobs: %d succeeded, %d failed; history files: %d, %d not returned whole; HTTP/JSON answers not as they must be: %d\n",
		l.calls, strings.Join(keys, ", "), l.jobsDone, len(l.jobsBad), l.historyFiles, len(l.historyBad), len(l.httpBad))
	var bad []string
	if n := l.codes[codes.Internal] + l.codes[codes.Unknown]; n > 0 {
		bad = append(bad, fmt.Sprintf("%d calls INTERNAL or UNKNOWN", n))
	}
	for _, list := range [][]string{l.jobsBad, l.historyBad, l.httpBad} {
		for i, p := range list {
			if i == 5 {
				bad = append(bad, fmt.Sprintf("... and %d more", len(list)-5))
				break
			}
			bad = append(bad, p)
		}
	}
	l.srv.mu.Lock()
	if l.srv.logErrors > 0 {
		bad = append(bad, fmt.Sprintf("%d error lines in the server's log", l.srv.logErrors))
	}
	l.srv.mu.Unlock()
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}
