package main

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/contentbackup/contentbackup/internal/history"
)

// TestHistoryMetrics (issue 38): every figure the alert rules and
// docs/history-server.md name is registered, and counts what it says.
func TestHistoryMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := historyMetrics(reg)
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
