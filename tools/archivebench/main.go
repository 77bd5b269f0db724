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
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/klauspost/compress/zstd"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/postgres"
)

func main() {
	dbURL := flag.String("database-url", os.Getenv("DATABASE_URL"), "Postgres URL of an empty database")
	serverBin := flag.String("server", "bin/server", "server binary")
	big := flag.Int("messages", 1_000_000, "messages of the large owner")
	small := flag.Int("small", 100_000, "messages of the small owner")
	flag.Parse()
	if err := run(*dbURL, *serverBin, *small, *big); err != nil {
		fmt.Fprintln(os.Stderr, "archivebench:", err)
		os.Exit(1)
	}
}

var key = bytes.Repeat([]byte{0x11}, 32)

// content is a 1 KiB text envelope.
func content() []byte {
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 30)
	ec := &mc.EncodedContent{Type: &mc.ContentTypeId{AuthorityId: "xmtp.org", TypeId: "text", VersionMajor: 1},
		Parameters: map[string]string{"encoding": "UTF-8"}}
	head, _ := proto.Marshal(ec)
	ec.Content = []byte(text[:1024-len(head)-3])
	b, _ := proto.Marshal(ec)
	return b
}

func message(i int, group, body []byte) *mb.GroupMessageSave {
	id := make([]byte, 32)
	binary.BigEndian.PutUint64(id, uint64(i))
	copy(id[8:], group)
	return &mb.GroupMessageSave{
		Id: id, GroupId: group, DecryptedMessageBytes: body, SentAtNs: 1_700_000_000_000_000_000 + int64(i),
		Kind: mb.GroupMessageKindSave_GROUP_MESSAGE_KIND_SAVE_APPLICATION, SenderInstallationId: bytes.Repeat([]byte{7}, 32),
		SenderInboxId: strings.Repeat("ab", 32), DeliveryStatus: mb.DeliveryStatusSave_DELIVERY_STATUS_SAVE_PUBLISHED,
		AuthorityId: "xmtp.org", ContentType: "text", VersionMajor: 1, ExpiryKnown: proto.Bool(true),
	}
}

var copyColumns = []string{"owner", "id", "group_id", "decrypted_message_bytes", "sent_at_ns", "kind",
	"sender_installation_id", "sender_inbox_id", "delivery_status", "content_type_save", "version_major",
	"version_minor", "authority_id", "reference_id", "sequence_id", "originator_id", "content_type",
	"expires_at_ns", "expiry_known"}

// messageRows feeds COPY FROM without holding the rows in memory.
type messageRows struct {
	owner string
	group []byte
	body  []byte
	i, n  int
}

func (r *messageRows) Next() bool { r.i++; return r.i <= r.n }
func (r *messageRows) Values() ([]any, error) {
	return append([]any{r.owner}, store.MessageArgs(message(r.i, r.group, r.body))...), nil
}
func (r *messageRows) Err() error { return nil }

type figure struct {
	name    string
	records int
	bytes   int64
	took    time.Duration
	rss     int64 // peak KiB, when measured
}

func (f figure) String() string {
	secs := f.took.Seconds()
	s := fmt.Sprintf("| %s | %d | %.1f s | %.0f | %.1f |", f.name, f.records, secs, float64(f.records)/secs, float64(f.bytes)/secs/1e6)
	if f.rss > 0 {
		s += fmt.Sprintf(" %.1f |", float64(f.rss)/1024)
	} else {
		s += " |"
	}
	return s
}

func run(dbURL, serverBin string, small, big int) error {
	if dbURL == "" {
		return errors.New("--database-url (or DATABASE_URL) is required")
	}
	ctx := context.Background()
	st, err := postgres.Open(ctx, dbURL, postgres.Options{Migrate: true})
	if err != nil {
		return err
	}
	defer st.Close()
	body := content()
	rowBytes := int64(len(body) + 32 + 16 + 32 + 64 + 40)
	var figures []figure

	fill := func(owner string, n int) (figure, error) {
		group := []byte(owner)[:16]
		g := &gb.GroupSave{Id: group, MembershipState: gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_ALLOWED, ConversationType: gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_GROUP}
		if _, err := st.PutGroup(ctx, owner, g); err != nil {
			return figure{}, err
		}
		start := time.Now()
		got, err := st.Pool().CopyFrom(ctx, pgx.Identifier{"messages"}, copyColumns, &messageRows{owner: owner, group: group, body: body, n: n})
		if err != nil || int(got) != n {
			return figure{}, fmt.Errorf("copy from: %d rows, %v", got, err)
		}
		return figure{name: fmt.Sprintf("Postgres COPY FROM (%d rows, ceiling of import)", n), records: n, bytes: int64(n) * rowBytes, took: time.Since(start)}, nil
	}
	bigOwner, smallOwner := "owner-big-0123456789", "owner-small-012345678"
	fmt.Fprintln(os.Stderr, "filling", big, "+", small, "messages")
	fb, err := fill(bigOwner, big)
	if err != nil {
		return err
	}
	if _, err := fill(smallOwner, small); err != nil {
		return err
	}
	figures = append(figures, fb)
	if _, err := st.Pool().Exec(ctx, "VACUUM ANALYZE messages"); err != nil {
		return err
	}

	start := time.Now()
	conn, err := st.Pool().Acquire(ctx)
	if err != nil {
		return err
	}
	tag, err := conn.Conn().PgConn().CopyTo(ctx, io.Discard, fmt.Sprintf(
		`COPY (SELECT %s FROM messages WHERE owner = '%s' ORDER BY group_id, sent_at_ns, id) TO STDOUT (FORMAT binary)`, store.MessageColumns, bigOwner))
	conn.Release()
	if err != nil {
		return err
	}
	figures = append(figures, figure{name: fmt.Sprintf("Postgres COPY TO (%d rows, ceiling of export)", tag.RowsAffected()), records: int(tag.RowsAffected()), bytes: int64(big) * rowBytes, took: time.Since(start)})

	srv, err := startServer(serverBin, dbURL)
	if err != nil {
		return err
	}
	defer srv.stop()
	cc, err := grpc.NewClient(srv.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(4<<20), grpc.WithInitialConnWindowSize(8<<20)) // as archivectl
	if err != nil {
		return err
	}
	defer cc.Close()
	client := cb.NewArchiveServiceClient(cc)

	export := func(owner string, n int, w io.Writer) (figure, int64, error) {
		srv.peak.Store(0)
		start := time.Now()
		stream, err := client.Export(ctx, &cb.ExportRequest{Owner: owner, Key: key})
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
				w.Write(c)
				size += int64(len(c))
			}
			if m.GetSummary() != nil {
				sum = m.GetSummary()
			}
		}
		if sum == nil || sum.GetMessages() != uint64(n) {
			return figure{}, 0, fmt.Errorf("export of %s: summary %v", owner, sum)
		}
		return figure{name: fmt.Sprintf("Export over gRPC, %d messages", n), records: n, bytes: int64(n) * rowBytes, took: time.Since(start), rss: srv.peak.Load()}, size, nil
	}
	fmt.Fprintln(os.Stderr, "exporting")
	fs, _, err := export(smallOwner, small, io.Discard)
	if err != nil {
		return err
	}
	file, err := os.CreateTemp("", "archivebench-*.xmtp")
	if err != nil {
		return err
	}
	defer os.Remove(file.Name())
	bw := bufio.NewWriterSize(file, 1<<20)
	fbig, archiveSize, err := export(bigOwner, big, bw)
	if err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	figures = append(figures, fs, fbig)

	fmt.Fprintln(os.Stderr, "importing")
	srv.peak.Store(0)
	start = time.Now()
	if _, err := file.Seek(0, io.SeekStart); err != nil {
		return err
	}
	is, err := client.Import(ctx)
	if err != nil {
		return err
	}
	if err := is.Send(&cb.ImportRequest{Payload: &cb.ImportRequest_Start{Start: &cb.ImportStart{Owner: "owner-restored-01234", Key: key}}}); err != nil {
		return err
	}
	buf := make([]byte, 256<<10)
	for {
		n, err := file.Read(buf)
		if n > 0 {
			if serr := is.Send(&cb.ImportRequest{Payload: &cb.ImportRequest_Chunk{Chunk: buf[:n]}}); serr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	res, err := is.CloseAndRecv()
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	if res.GetMessages().GetInserted() != uint64(big) {
		return fmt.Errorf("import inserted %d", res.GetMessages().GetInserted())
	}
	figures = append(figures, figure{name: fmt.Sprintf("Import over gRPC, %d messages", big), records: big, bytes: int64(big) * rowBytes, took: time.Since(start), rss: srv.peak.Load()})

	fmt.Fprintln(os.Stderr, "raw container work")
	raw, err := rawSealCompress(big, body)
	if err != nil {
		return err
	}
	raw.bytes = int64(big) * rowBytes
	figures = append(figures, raw)

	fmt.Printf("archive: %d bytes for %d messages\n\n", archiveSize, big)
	fmt.Println("| what | records | time | records/s | MB/s (row bytes) | server peak RSS (MiB) |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, f := range figures {
		fmt.Println(f)
	}
	return nil
}

// rawSealCompress is the container's ceiling over the same records:
// marshal is excluded, sealing and one zstd stream included.
func rawSealCompress(n int, body []byte) (figure, error) {
	el, _ := proto.Marshal(&ds.BackupElement{Element: &ds.BackupElement_GroupMessage{GroupMessage: message(1, []byte("0123456789abcdef"), body)}})
	block, _ := aes.NewCipher(key)
	aead, _ := cipher.NewGCM(block)
	enc, err := zstd.NewWriter(io.Discard, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1), zstd.WithEncoderCRC(false), zstd.WithWindowSize(2<<20))
	if err != nil {
		return figure{}, err
	}
	var nonce [12]byte
	rand.Read(nonce[:])
	sealed := make([]byte, 0, len(el)+20)
	start := time.Now()
	for i := range n {
		binary.LittleEndian.PutUint64(nonce[:], uint64(i))
		sealed = binary.LittleEndian.AppendUint32(sealed[:0], uint32(len(el)+16))
		sealed = aead.Seal(sealed, nonce[:], el, nil)
		enc.Write(sealed)
	}
	enc.Close()
	return figure{name: fmt.Sprintf("raw AES-256-GCM + zstd, %d records (ceiling of the container)", n), records: n, took: time.Since(start)}, nil
}

type server struct {
	cmd  *exec.Cmd
	addr string
	peak atomic.Int64
	done chan struct{}
}

// startServer runs the server binary on the database and samples its
// resident set every 20 ms.
func startServer(bin, dbURL string) (*server, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := lis.Addr().String()
	lis.Close()
	cmd := exec.Command(bin, "--listen", addr, "--metrics-listen=", "--log-level", "warn")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, addr: addr, done: make(chan struct{})}
	go func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-t.C:
				if kb := rssKiB(cmd.Process.Pid); kb > s.peak.Load() {
					s.peak.Store(kb)
				}
			}
		}
	}()
	for range 100 {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return s, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.stop()
	return nil, errors.New("the server did not start")
}

func (s *server) stop() {
	close(s.done)
	s.cmd.Process.Signal(os.Interrupt)
	s.cmd.Wait()
}

func rssKiB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				v, _ := strconv.ParseInt(f[1], 10, 64)
				return v
			}
		}
	}
	return 0
}
