package main

import (
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/codec"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// TestBinaryMetrics: after traffic, /metrics holds the domain metrics
// (archive bytes, records and durations; decode outcomes by type and kind;
// store health; refusals) and the engine's pool statistics, on each
// engine.
func TestBinaryMetrics(t *testing.T) {
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			dataDir := t.TempDir()
			env := []string{"LISTEN_ADDR=127.0.0.1:0", "METRICS_ADDR=127.0.0.1:0", "LOG_FORMAT=json", "DATA_DIR=" + dataDir}
			want := []string{`go_sql_wait_count_total{db_name="sqlite_writer"}`, `go_sql_wait_duration_seconds_total{db_name="sqlite_writer"}`}
			if engine == "postgres" {
				env = append(env, "DATABASE_URL="+storetest.NewPostgresDatabase(t))
				want = []string{"contentbackup_pgxpool_acquires_total", "contentbackup_pgxpool_acquire_wait_seconds_total", "contentbackup_pgxpool_idle_conns"}
			}
			srv := serveIn(t, env...)
			addr, logs := srv.addr, srv.logs
			conn := dialToken(t, addr, filepath.Join(dataDir, "dev-token"))
			ctx := t.Context()
			conv := cb.NewConversationServiceClient(conn)
			if _, err := conv.PutGroup(ctx, &cb.PutGroupRequest{Owner: "o", Group: storetest.FullGroup("g")}); err != nil {
				t.Fatal(err)
			}
			content := cb.NewContentServiceClient(conn)
			for _, b := range [][]byte{[]byte("not an envelope"), textEnvelope(t)} {
				if _, err := content.Decode(ctx, &cb.DecodeRequest{EncodedContent: b}); err != nil {
					t.Fatal(err)
				}
			}
			arch := cb.NewArchiveServiceClient(conn)
			key := make([]byte, 32)
			stream, err := arch.Export(ctx, &cb.ExportRequest{Owner: "o", Key: key})
			if err != nil {
				t.Fatal(err)
			}
			var data []byte
			for {
				m, err := stream.Recv()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				data = append(data, m.GetChunk()...)
			}
			imp, err := arch.Import(ctx)
			if err != nil {
				t.Fatal(err)
			}
			_ = imp.Send(&cb.ImportRequest{Payload: &cb.ImportRequest_Start{Start: &cb.ImportStart{Owner: "p", Key: key}}})
			_ = imp.Send(&cb.ImportRequest{Payload: &cb.ImportRequest_Chunk{Chunk: data}})
			if _, err := imp.CloseAndRecv(); err != nil {
				t.Fatal(err)
			}

			metricsAddr := ""
			for _, line := range strings.Split(logs(), "\n") {
				var e struct{ Msg, Addr string }
				if json.Unmarshal([]byte(line), &e) == nil && e.Msg == "serving metrics" {
					metricsAddr = e.Addr
				}
			}
			body := scrape(t, "http://"+metricsAddr+"/metrics")
			want = append(want,
				`contentbackup_archive_bytes_total{direction="export"}`,
				`contentbackup_archive_bytes_total{direction="import"}`,
				`contentbackup_archive_records_total{direction="export",kind="group"} 1`,
				`contentbackup_archive_records_total{direction="import",kind="group"} 1`,
				`contentbackup_archive_duration_seconds_count{direction="export",outcome="ok"} 1`,
				`contentbackup_archive_duration_seconds_count{direction="import",outcome="ok"} 1`,
				`contentbackup_decode_outcomes_total{content_type="other",outcome="malformed_envelope"} 1`,
				`contentbackup_decode_outcomes_total{content_type="xmtp.org/text:1",outcome="decoded"} 1`,
				"contentbackup_store_up 1",
			)
			for _, w := range want {
				if !strings.Contains(body, w) {
					t.Errorf("/metrics lacks %s", w)
				}
			}
		})
	}
}

func textEnvelope(t *testing.T) []byte {
	t.Helper()
	ec, err := codec.NewRegistry().Encode(codec.TypeText, "hi")
	if err != nil {
		t.Fatal(err)
	}
	b, err := proto.Marshal(ec)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
