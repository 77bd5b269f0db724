package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
)

// TestMonitoringReadsWhatTheServerExports: every gRPC metric a dashboard
// panel or an alert rule reads (grpc_server_*, which a library defines,
// not the code test/deploy reads) is among the families a running server
// exports on /metrics once it has answered a call, and a latency rule's
// le="1" is one of its handling-time buckets.
func TestMonitoringReadsWhatTheServerExports(t *testing.T) {
	dataDir := t.TempDir()
	srv := serveIn(t, "LISTEN_ADDR=127.0.0.1:0", "METRICS_ADDR=127.0.0.1:0", "LOG_FORMAT=json", "DATA_DIR="+dataDir)
	conn := dialToken(t, srv.addr, filepath.Join(dataDir, "dev-token"))
	if _, err := cb.NewContentServiceClient(conn).Encode(t.Context(), &cb.EncodeRequest{Input: &cb.EncodeRequest_Content{Content: &cb.Content{Value: &cb.Content_Text{Text: "hi"}}}}); err != nil {
		t.Fatal(err)
	}
	metricsAddr := ""
	for _, line := range strings.Split(srv.logs(), "\n") {
		var e struct{ Msg, Addr string }
		if json.Unmarshal([]byte(line), &e) == nil && e.Msg == "serving metrics" {
			metricsAddr = e.Addr
		}
	}
	page := scrape(t, "http://"+metricsAddr+"/metrics")
	exported := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (\S+) (\S+)$`).FindAllStringSubmatch(page, -1) {
		exported[m[1]] = true
		if m[2] == "histogram" {
			for _, s := range []string{"_bucket", "_count", "_sum"} {
				exported[m[1]+s] = true
			}
		}
	}
	files, _ := filepath.Glob("../../deploy/grafana/*.json")
	files = append(files, "../../deploy/prometheus/contentbackup-alerts.yml")
	read := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range regexp.MustCompile(`\bgrpc_server_[a-z_]+`).FindAllString(string(b), -1) {
			read++
			if !exported[name] {
				t.Errorf("%s reads %s, which the server does not export", f, name)
			}
		}
	}
	if read == 0 {
		t.Fatal("no dashboard or rule reads a grpc_server_ metric: the service's panels and burn-rate alerts are gone")
	}
	if !strings.Contains(page, `grpc_server_handling_seconds_bucket{grpc_method="Encode",grpc_service="contentbackup.v1.ContentService",grpc_type="unary",le="1"}`) {
		t.Error(`the handling-time histogram has no le="1" bucket, which the latency objective's rules read`)
	}
}
