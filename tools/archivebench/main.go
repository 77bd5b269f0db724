// Command archivebench measures export and import at scale against their
// ceilings, in one run on one machine: it fills a Postgres database with
// messages of 1 KiB (by COPY FROM, timed: the store's write ceiling),
// reads them back by COPY TO (the store's read ceiling), starts the server
// binary as its own process, and times Export of a 100,000-message owner
// and of a 1,000,000-message owner and Import of the latter, sampling the
// server's resident memory throughout; last, it times raw AES-256-GCM +
// zstd over the same records (the container's ceiling). Run by
// `make bench-archive`; figures go to BENCHMARKS.md.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/postgres"
	"github.com/contentbackup/contentbackup/internal/transport"
	"github.com/contentbackup/contentbackup/tools/internal/benchrows"
	"github.com/contentbackup/contentbackup/tools/internal/roundtable"
)

func main() {
	dbURL := flag.String("database-url", os.Getenv("DATABASE_URL"), "Postgres URL of an empty database")
	serverBin := flag.String("server", "bin/server", "server binary")
	big := flag.Int("messages", 1_000_000, "messages of the large owner")
	small := flag.Int("small", 100_000, "messages of the small owner, exported once to show memory stays flat")
	runs := flag.Int("runs", 3, "rounds of COPY FROM, COPY TO, export and import, each read against its own ceilings")
	profiles := flag.String("profile-dir", "", "when set, the server's CPU profiles of the first round's export and import are written here and summarised")
	flag.Parse()
	if err := run(*dbURL, *serverBin, *small, *big, *runs, *profiles); err != nil {
		fmt.Fprintln(os.Stderr, "archivebench:", err)
		os.Exit(1)
	}
}

var key = bytes.Repeat([]byte{0x11}, 32)

// Targets, as ratios to the ceilings (BENCHMARKS.md).
const (
	exportTarget = 0.7
	importTarget = 0.5
	rssTargetMiB = 200
)

type figure struct {
	name    string
	records int
	bytes   int64
	took    time.Duration
	rss     int64 // peak KiB, when measured
	// rssAnon is the anonymous part of the peak (heap, stacks): what the
	// server allocates, without the binary's own pages, which are most of
	// an idle server's RSS (its cloud storage drivers are large).
	rssAnon int64
	// CPU seconds the server and this process (the client) spent in the
	// phase, when measured: on two shared cores they say whose work the
	// time went to.
	serverCPU, clientCPU float64
}

func (f figure) rate() float64 { return float64(f.records) / f.took.Seconds() }

func (f figure) String() string {
	secs := f.took.Seconds()
	s := fmt.Sprintf("| %s | %d | %.1f s | %.0f | %.1f |", f.name, f.records, secs, f.rate(), float64(f.bytes)/secs/1e6)
	if f.rss > 0 {
		s += fmt.Sprintf(" %.1f (%.1f anonymous) |", float64(f.rss)/1024, float64(f.rssAnon)/1024)
	} else {
		s += " |"
	}
	if f.serverCPU > 0 {
		s += fmt.Sprintf(" %.1f s / %.1f s |", f.serverCPU, f.clientCPU)
	} else {
		s += " |"
	}
	return s
}

// cpuSeconds is the user and system time of a process so far.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100 // USER_HZ
}

// cpuMeter reads the server's and this process's CPU time at the start of
// a phase; done fills the figure with what the phase spent.
func (b *bench) cpuMeter() func(*figure) {
	server, client := cpuSeconds(b.srv.cmd.Process.Pid), cpuSeconds(os.Getpid())
	return func(f *figure) {
		f.serverCPU = cpuSeconds(b.srv.cmd.Process.Pid) - server
		f.clientCPU = cpuSeconds(os.Getpid()) - client
	}
}

// bench holds what every round uses.
type bench struct {
	ctx      context.Context
	st       *postgres.Store
	srv      *server
	client   cb.ArchiveServiceClient
	body     []byte
	rowBytes int64
}

func run(dbURL, serverBin string, small, big, runs int, profileDir string) error {
	if dbURL == "" {
		return errors.New("--database-url (or DATABASE_URL) is required")
	}
	ctx := context.Background()
	st, err := postgres.Open(ctx, dbURL, postgres.Options{Migrate: true})
	if err != nil {
		return err
	}
	defer st.Close()
	// Reproducible figures: autovacuum would wake after a million inserts
	// and take one of the two cores in the middle of whatever comes next,
	// so it is off for this throwaway database's tables and each phase
	// starts after an explicit VACUUM ANALYZE and CHECKPOINT instead
	// (dirty buffers of the phase before are written out first, not
	// during the next one).
	for _, t := range []string{"messages", "groups"} {
		if _, err := st.Pool().Exec(ctx, "ALTER TABLE "+t+" SET (autovacuum_enabled = false)"); err != nil {
			return err
		}
	}
	settings, err := postgresSettings(ctx, st)
	if err != nil {
		return err
	}
	b := &bench{ctx: ctx, st: st, body: benchrows.Content()}
	b.rowBytes = int64(len(b.body) + 32 + 16 + 32 + 64 + 40)
	if b.srv, err = startServer(serverBin, dbURL, profileDir != ""); err != nil {
		return err
	}
	defer b.srv.stop()
	opts, err := transport.DialOptions(transport.ClientOptions{Insecure: true, Token: b.srv.token})
	if err != nil {
		return err
	}
	// Stream windows and buffers as archivectl sets them.
	cc, err := grpc.NewClient(b.srv.addr, append(opts, transport.ArchiveDialOptions()...)...)
	if err != nil {
		return err
	}
	defer cc.Close()
	b.client = cb.NewArchiveServiceClient(cc)

	file, err := os.CreateTemp("", "archivebench-*.xmtp")
	if err != nil {
		return err
	}
	defer os.Remove(file.Name())
	defer file.Close()

	fmt.Printf("Postgres: %s\n\n", settings)
	type round struct{ copyFrom, copyTo, export, exportFile, imp, raw figure }
	var rounds []round
	var smallExport figure
	var archiveSize int64
	for r := 1; r <= runs; r++ {
		owner := fmt.Sprintf("owner-big-%d-0123456789", r)
		var rd round
		fmt.Fprintf(os.Stderr, "round %d: COPY FROM %d messages\n", r, big)
		if rd.copyFrom, err = b.fill(owner, big); err != nil {
			return err
		}
		if r == 1 && small > 0 {
			if _, err := b.fill("owner-small-012345678", small); err != nil {
				return err
			}
		}
		if err := b.settle(); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "round %d: COPY TO\n", r)
		if rd.copyTo, err = b.copyTo(owner, big); err != nil {
			return err
		}
		if r == 1 && small > 0 {
			if err := b.settle(); err != nil {
				return err
			}
			if smallExport, _, err = b.export("owner-small-012345678", small, io.Discard, ""); err != nil {
				return err
			}
		}
		if err := b.settle(); err != nil {
			return err
		}
		// Export as COPY TO runs: the bytes delivered to the client and
		// dropped there. Then again into a file, for the import, timed and
		// shown apart: writing 1.2 GB to disk is the client's work.
		fmt.Fprintf(os.Stderr, "round %d: export\n", r)
		profile := ""
		if r == 1 && profileDir != "" {
			profile = filepath.Join(profileDir, "export.pprof")
		}
		if rd.export, archiveSize, err = b.export(owner, big, io.Discard, profile); err != nil {
			return err
		}
		if err := b.settle(); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "round %d: export to a file\n", r)
		if _, err := file.Seek(0, io.SeekStart); err != nil {
			return err
		}
		if err := file.Truncate(0); err != nil {
			return err
		}
		bw := bufio.NewWriterSize(file, 1<<20)
		if rd.exportFile, _, err = b.export(owner, big, bw, ""); err != nil {
			return err
		}
		rd.exportFile.name += ", into a file"
		if err := bw.Flush(); err != nil {
			return err
		}
		if err := b.settle(); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "round %d: import\n", r)
		if r == 1 && profileDir != "" {
			profile = filepath.Join(profileDir, "import.pprof")
		}
		if rd.imp, err = b.importFile(file, fmt.Sprintf("owner-restored-%d-01234", r), big, profile); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "round %d: raw container work\n", r)
		if rd.raw, err = rawSealCompress(big, b.body); err != nil {
			return err
		}
		rd.raw.bytes = int64(big) * b.rowBytes
		rounds = append(rounds, rd)
		fmt.Fprintf(os.Stderr, "round %d: export %.2f x COPY TO, import %.2f x COPY FROM\n", r, rd.export.rate()/rd.copyTo.rate(), rd.imp.rate()/rd.copyFrom.rate())
	}

	fmt.Printf("archive: %d bytes for %d messages\n\n", archiveSize, big)
	fmt.Println("| what | records | time | records/s | MB/s (row bytes) | server peak RSS (MiB) | CPU: server / client |")
	fmt.Println("|---|---|---|---|---|---|---|")
	if small > 0 {
		fmt.Println(smallExport)
	}
	for i, rd := range rounds {
		fmt.Printf("| **round %d** | | | | | | |\n", i+1)
		for _, f := range []figure{rd.copyFrom, rd.copyTo, rd.export, rd.exportFile, rd.imp, rd.raw} {
			fmt.Println(f)
		}
	}
	fmt.Print("\n" + roundtable.Header("ratio", "target", len(rounds)))
	var exp, imp, rss, anon []float64
	for _, rd := range rounds {
		exp = append(exp, rd.export.rate()/rd.copyTo.rate())
		imp = append(imp, rd.imp.rate()/rd.copyFrom.rate())
		rss = append(rss, float64(max(rd.export.rss, rd.imp.rss))/1024)
		anon = append(anon, float64(max(rd.export.rssAnon, rd.imp.rssAnon))/1024)
	}
	fmt.Print(roundtable.Row("Export over gRPC / COPY TO", fmt.Sprintf("≥ %.2f", exportTarget), exp, "%.2f", roundtable.AtLeast(exportTarget)))
	fmt.Print(roundtable.Row("Import over gRPC / COPY FROM", fmt.Sprintf("≥ %.2f", importTarget), imp, "%.2f", roundtable.AtLeast(importTarget)))
	fmt.Print(roundtable.Row("server peak RSS, export and import (MiB)", fmt.Sprintf("< %d", rssTargetMiB), rss, "%.1f", func(v float64) bool { return v < rssTargetMiB }))
	fmt.Print(roundtable.Row("of which anonymous (heap, stacks; MiB)", fmt.Sprintf("< %d", rssTargetMiB), anon, "%.1f", func(v float64) bool { return v < rssTargetMiB }))
	if profileDir != "" {
		for _, name := range []string{"export", "import"} {
			fmt.Printf("\nserver CPU profile, %s (round 1), top 5 frames by flat time:\n", name)
			out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount", "5", serverBin, filepath.Join(profileDir, name+".pprof")).Output()
			if err != nil {
				return fmt.Errorf("pprof %s: %w", name, err)
			}
			fmt.Print(topLines(string(out)))
		}
	}
	return nil
}

// topLines keeps pprof's table: its header and rows.
func topLines(out string) string {
	var b strings.Builder
	table := false
	for _, line := range strings.Split(out, "\n") {
		table = table || strings.Contains(line, "flat%")
		if table && strings.TrimSpace(line) != "" {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

func postgresSettings(ctx context.Context, st *postgres.Store) (string, error) {
	rows, err := st.Pool().Query(ctx, `SELECT name || '=' || setting || COALESCE(unit, '') FROM pg_settings
		WHERE name IN ('shared_buffers', 'max_wal_size', 'checkpoint_timeout', 'fsync', 'synchronous_commit', 'full_page_writes', 'wal_level') ORDER BY name`)
	if err != nil {
		return "", err
	}
	var out []string
	var s string
	if _, err := pgx.ForEachRow(rows, []any{&s}, func() error { out = append(out, s); return nil }); err != nil {
		return "", err
	}
	return strings.Join(out, ", "), nil
}

// settle starts the next phase from the same state every time: statistics
// current and no dirty buffers left to write.
func (b *bench) settle() error {
	if _, err := b.st.Pool().Exec(b.ctx, "VACUUM ANALYZE messages"); err != nil {
		return err
	}
	_, err := b.st.Pool().Exec(b.ctx, "CHECKPOINT")
	return err
}

// fill stores n messages of a new owner by COPY FROM: the ceiling of import.
func (b *bench) fill(owner string, n int) (figure, error) {
	group := []byte(owner)[:16]
	g := &gb.GroupSave{Id: group, MembershipState: gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_ALLOWED, ConversationType: gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_GROUP}
	if _, err := b.st.PutGroup(b.ctx, owner, g); err != nil {
		return figure{}, err
	}
	if _, err := b.st.Pool().Exec(b.ctx, "CHECKPOINT"); err != nil {
		return figure{}, err
	}
	start := time.Now()
	got, err := b.st.Pool().CopyFrom(b.ctx, pgx.Identifier{"messages"}, benchrows.CopyColumns, &benchrows.Rows{Owner: owner, Group: group, Body: b.body, N: n})
	if err != nil || int(got) != n {
		return figure{}, fmt.Errorf("copy from: %d rows, %v", got, err)
	}
	return figure{name: fmt.Sprintf("Postgres COPY FROM (ceiling of import), %d rows", n), records: n, bytes: int64(n) * b.rowBytes, took: time.Since(start)}, nil
}

// copyTo reads the owner's rows in export order by COPY TO: the ceiling of
// export.
func (b *bench) copyTo(owner string, n int) (figure, error) {
	start := time.Now()
	conn, err := b.st.Pool().Acquire(b.ctx)
	if err != nil {
		return figure{}, err
	}
	defer conn.Release()
	tag, err := conn.Conn().PgConn().CopyTo(b.ctx, io.Discard, fmt.Sprintf(
		`COPY (SELECT %s FROM messages WHERE owner = '%s' ORDER BY group_id, sent_at_ns, id) TO STDOUT (FORMAT binary)`, store.MessageColumns, owner))
	if err != nil {
		return figure{}, err
	}
	if int(tag.RowsAffected()) != n {
		return figure{}, fmt.Errorf("copy to: %d rows", tag.RowsAffected())
	}
	return figure{name: fmt.Sprintf("Postgres COPY TO (ceiling of export), %d rows", n), records: n, bytes: int64(n) * b.rowBytes, took: time.Since(start)}, nil
}

// export runs Export over gRPC into w; with profile set, the server's CPU
// profile of the export is written there.
func (b *bench) export(owner string, n int, w io.Writer, profile string) (figure, int64, error) {
	b.srv.peak.Store(0)
	b.srv.peakAnon.Store(0)
	stopProfile := b.srv.profile(profile)
	cpu := b.cpuMeter()
	start := time.Now()
	stream, err := b.client.Export(b.ctx, &cb.ExportRequest{Owner: owner, Key: key})
	if err != nil {
		return figure{}, 0, err
	}
	var size int64
	var sum *cb.ExportSummary
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return figure{}, 0, err
		}
		if c := m.GetChunk(); len(c) > 0 {
			if _, err := w.Write(c); err != nil {
				return figure{}, 0, err
			}
			size += int64(len(c))
		}
		if m.GetSummary() != nil {
			sum = m.GetSummary()
		}
	}
	took := time.Since(start)
	if err := stopProfile(); err != nil {
		return figure{}, 0, err
	}
	if sum == nil || sum.GetMessages() != uint64(n) {
		return figure{}, 0, fmt.Errorf("export of %s: summary %v", owner, sum)
	}
	f := figure{name: fmt.Sprintf("Export over gRPC, %d messages", n), records: n, bytes: int64(n) * b.rowBytes, took: took, rss: b.srv.peak.Load(), rssAnon: b.srv.peakAnon.Load()}
	cpu(&f)
	return f, size, nil
}

// importFile runs Import over gRPC of the archive in file into owner.
func (b *bench) importFile(file *os.File, owner string, n int, profile string) (figure, error) {
	if _, err := file.Seek(0, io.SeekStart); err != nil {
		return figure{}, err
	}
	b.srv.peak.Store(0)
	b.srv.peakAnon.Store(0)
	stopProfile := b.srv.profile(profile)
	cpu := b.cpuMeter()
	start := time.Now()
	is, err := b.client.Import(b.ctx)
	if err != nil {
		return figure{}, err
	}
	if err := is.Send(&cb.ImportRequest{Payload: &cb.ImportRequest_Start{Start: &cb.ImportStart{Owner: owner, Key: key}}}); err != nil {
		return figure{}, err
	}
	buf := make([]byte, 256<<10)
	for {
		k, err := file.Read(buf)
		if k > 0 {
			if serr := is.Send(&cb.ImportRequest{Payload: &cb.ImportRequest_Chunk{Chunk: buf[:k]}}); serr != nil {
				break // the server ended the call: CloseAndRecv says why
			}
		}
		if err != nil {
			break
		}
	}
	res, err := is.CloseAndRecv()
	if err != nil {
		return figure{}, fmt.Errorf("import: %w", err)
	}
	took := time.Since(start)
	if err := stopProfile(); err != nil {
		return figure{}, err
	}
	if res.GetMessages().GetInserted() != uint64(n) {
		return figure{}, fmt.Errorf("import inserted %d", res.GetMessages().GetInserted())
	}
	f := figure{name: fmt.Sprintf("Import over gRPC, %d messages", n), records: n, bytes: int64(n) * b.rowBytes, took: took, rss: b.srv.peak.Load(), rssAnon: b.srv.peakAnon.Load()}
	cpu(&f)
	return f, nil
}

// rawSealCompress is the container's ceiling over the same records:
// marshal is excluded; sealing, and framing the ciphertext into
// raw zstd blocks of 32 KiB (copying it once), included.
func rawSealCompress(n int, body []byte) (figure, error) {
	el, _ := proto.Marshal(&ds.BackupElement{Element: &ds.BackupElement_GroupMessage{GroupMessage: benchrows.Message(1, []byte("0123456789abcdef"), body)}})
	block, _ := aes.NewCipher(key)
	aead, _ := cipher.NewGCM(block)
	var nonce [12]byte
	rand.Read(nonce[:])
	sealed := make([]byte, 0, len(el)+20)
	frame := make([]byte, 3, 3+32<<10) // a block header, then its data
	start := time.Now()
	for i := range n {
		binary.LittleEndian.PutUint64(nonce[:], uint64(i))
		sealed = binary.LittleEndian.AppendUint32(sealed[:0], uint32(len(el)+16))
		sealed = aead.Seal(sealed, nonce[:], el, nil)
		for p := sealed; len(p) > 0; {
			k := min(len(p), cap(frame)-len(frame))
			frame, p = append(frame, p[:k]...), p[k:]
			if len(frame) == cap(frame) {
				io.Discard.Write(frame)
				frame = frame[:3]
			}
		}
	}
	return figure{name: fmt.Sprintf("raw AES-256-GCM + raw zstd blocks, %d records (ceiling of the container)", n), records: n, took: time.Since(start)}, nil
}

type server struct {
	cmd         *exec.Cmd
	addr        string
	metricsAddr string
	token       string
	dataDir     string
	peak        atomic.Int64
	peakAnon    atomic.Int64
	done        chan struct{}
}

// startServer runs the server binary on the database, with its development
// token in a data directory of its own (loopback, nothing configured), and
// samples its resident set every 20 ms. profiles serves Go's profiles on
// its metrics address.
func startServer(bin, dbURL string, profiles bool) (*server, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	metricsAddr := ""
	if profiles {
		if metricsAddr, err = freeAddr(); err != nil {
			return nil, err
		}
	}
	dataDir, err := os.MkdirTemp("", "archivebench-data")
	if err != nil {
		return nil, err
	}
	args := []string{"--listen", addr, "--metrics-listen=" + metricsAddr, "--log-level", "warn", "--data-dir", dataDir}
	if profiles {
		args = append(args, "--pprof")
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, addr: addr, metricsAddr: metricsAddr, dataDir: dataDir, done: make(chan struct{})}
	go func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-t.C:
				kb, anon := rssKiB(cmd.Process.Pid)
				if kb > s.peak.Load() {
					s.peak.Store(kb)
				}
				if anon > s.peakAnon.Load() {
					s.peakAnon.Store(anon)
				}
			}
		}
	}()
	for range 100 {
		token, err := os.ReadFile(filepath.Join(dataDir, "dev-token"))
		if c, derr := net.Dial("tcp", addr); derr == nil && err == nil {
			c.Close()
			s.token = strings.TrimSpace(string(token))
			return s, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.stop()
	return nil, errors.New("the server did not start")
}

func freeAddr() (string, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer lis.Close()
	return lis.Addr().String(), nil
}

// profile starts a CPU profile of the server written to path when it is
// set, until the returned function is called.
func (s *server) profile(path string) (stop func() error) {
	if path == "" {
		return func() error { return nil }
	}
	// /debug/pprof/profile samples for a fixed time, and a cancelled
	// request loses it: the profile covers the phase's first 30 seconds.
	done := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + s.metricsAddr + "/debug/pprof/profile?seconds=30")
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(path)
		if err != nil {
			done <- err
			return
		}
		_, err = io.Copy(f, resp.Body)
		done <- errors.Join(err, f.Close())
	}()
	return func() error { return <-done }
}

func (s *server) stop() {
	close(s.done)
	_ = s.cmd.Process.Signal(os.Interrupt)
	_ = s.cmd.Wait()
	os.RemoveAll(s.dataDir)
}

// rssKiB returns the process's resident set and its anonymous part, in
// KiB, from /proc.
func rssKiB(pid int) (rss, anon int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			rss, _ = strconv.ParseInt(f[1], 10, 64)
		case "RssAnon:":
			anon, _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	return rss, anon
}
