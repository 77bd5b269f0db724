package telemetry

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/contentbackup/contentbackup/internal/jobs"
)

// TestErasedOwnerLeavesNoSeries (issue 46, finding 11): once an erasure
// completes, no metric series names the owner; another owner's stay.
func TestErasedOwnerLeavesNoSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewJobMetrics(reg)
	var cfg jobs.Config
	m.Instrument(&cfg)
	now := time.Now()
	for _, owner := range []string{"alice", "bob"} {
		cfg.Freshness.BackupSucceeded("nightly", owner, now)
		cfg.Freshness.BackupVerified("nightly", owner, now, true)
		cfg.Freshness.ExportBlocked("nightly", owner, true)
	}
	cfg.Freshness.OwnerErased("alice")
	owners := map[string]int{}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, metric := range f.GetMetric() {
			for _, l := range metric.GetLabel() {
				if l.GetName() == "owner" {
					owners[l.GetValue()]++
				}
			}
		}
	}
	if owners["alice"] != 0 || owners["bob"] != 3 {
		t.Errorf("series by owner after alice's erasure: %v; want none of alice's, bob's 3", owners)
	}
}
