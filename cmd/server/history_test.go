package main

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"go.uber.org/zap"

	"github.com/contentbackup/contentbackup/internal/history"
	"github.com/contentbackup/contentbackup/internal/jobs"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/telemetry"
)

// TestHistoryMetrics (issue 38): every figure the alert rules and
// docs/history-server.md name is registered, and counts what it says.
func TestHistoryMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := telemetry.HistoryMetrics(reg)
	m.Uploaded(100)
	m.Uploaded(50)
	m.Downloaded(100)
	m.Expired(2, 150)
	m.Refused(history.RefusedFull)
	m.Stored(300, 3)
	m.MaxTotal(1000)
	for name, want := range map[string]float64{
		"contentbackup_history_uploads_total":        2,
		"contentbackup_history_upload_bytes_total":   150,
		"contentbackup_history_downloads_total":      1,
		"contentbackup_history_download_bytes_total": 100,
		"contentbackup_history_expired_files_total":  2,
		"contentbackup_history_stored_bytes":         300,
		"contentbackup_history_files":                3,
		"contentbackup_history_max_total_bytes":      1000,
	} {
		got, err := testutil.GatherAndCount(reg, name)
		if err != nil || got != 1 {
			t.Errorf("%s: %d series, %v", name, got, err)
			continue
		}
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			m := mf.GetMetric()[0]
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			if v != want {
				t.Errorf("%s = %v, want %v", name, v, want)
			}
		}
	}
	if n, err := testutil.GatherAndCount(reg, "contentbackup_history_refusals_total"); err != nil || n != 7 {
		t.Errorf("refusal reasons registered: %d, %v; want all 7 at zero or more", n, err)
	}
}

// TestHistoryListenerTLS (issue 38): with TLS, the history listener
// serves the gRPC listener's certificate; a device-sync client (no client
// certificate, as the SDKs) uploads and downloads over HTTPS, and plain
// HTTP is not answered as the protocol.
func TestHistoryListenerTLS(t *testing.T) {
	out := t.TempDir()
	setup := exec.Command("bash", "../../deploy/compose/setup.sh")
	setup.Env = append(os.Environ(), "OUT="+out)
	if b, err := setup.CombinedOutput(); err != nil {
		t.Fatalf("setup.sh: %v\n%s", err, b)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	historyAddr := lis.Addr().String()
	lis.Close()
	serveIn(t, "LISTEN_ADDR=127.0.0.1:0", "METRICS_ADDR=", "LOG_FORMAT=json", "DATA_DIR="+t.TempDir(),
		"TLS_CERT="+filepath.Join(out, "tls/server.crt"), "TLS_KEY="+filepath.Join(out, "tls/server.key"),
		"TLS_CLIENT_CA="+filepath.Join(out, "tls/ca.crt"), "AUTH_POLICY="+filepath.Join(out, "policy.yaml"),
		"PAGE_TOKEN_KEY_FILE="+filepath.Join(out, "page-token.key"), "HISTORY_LISTEN_ADDR="+historyAddr)
	ca, err := os.ReadFile(filepath.Join(out, "tls/ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}}}
	base := "https://" + historyAddr
	resp, err := client.Post(base+"/upload", "", strings.NewReader("an archive"))
	if err != nil {
		t.Fatal(err)
	}
	id, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("upload over TLS: %d %s", resp.StatusCode, id)
	}
	resp, err = client.Get(base + "/files/" + string(id))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "an archive" {
		t.Fatalf("download over TLS: %d %q", resp.StatusCode, body)
	}
	if resp, err := http.Get("http://" + historyAddr + "/files/" + string(id)); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP to the TLS listener answered the file: %q", b)
		}
	}
}

// TestHistoryDefaultTotalIsADiskShare (issue 47, finding 1): without
// --history-max-total, history files on a file bucket may hold a quarter
// of its disk (at most 10 GiB), never a constant a small disk cannot
// hold; a value given is kept.
func TestHistoryDefaultTotalIsADiskShare(t *testing.T) {
	// tmpfs where there is one: a disk smaller than 40 GiB, so the share
	// and not the cap decides.
	base := t.TempDir()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if dir, err := os.MkdirTemp("/dev/shm", "history-share"); err == nil {
			base = dir
			t.Cleanup(func() { os.RemoveAll(dir) })
		}
	}
	size, err := jobs.DiskBytes(base)
	if err != nil {
		t.Fatal(err)
	}
	want := min(int64(size/4), history.DefaultMaxTotal)
	for _, c := range []struct {
		flag, want int64
	}{{0, want}, {12345, 12345}} {
		reg := prometheus.NewRegistry()
		f := historyFlags{HistoryListen: "127.0.0.1:0", HistoryMaxTotal: c.flag}
		_, closeFn, err := f.history(t.Context(), base, 0, enginetest.SQLite(t), reg, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		closeFn()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var got float64 = -1
		for _, mf := range mfs {
			if mf.GetName() == "contentbackup_history_max_total_bytes" {
				got = mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		if int64(got) != c.want {
			t.Errorf("--history-max-total %d on a %d-byte disk: the total is %v, want %d", c.flag, size, got, c.want)
		}
	}
}
