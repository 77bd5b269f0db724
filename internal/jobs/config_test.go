package jobs

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// TestConfigDefaults: an unset setting takes its documented default
// (RELIABILITY.md's limits table), and a set one is kept.
func TestConfigDefaults(t *testing.T) {
	m := New(Config{})
	defer m.Runner.stop()
	c := m.cfg
	host, _ := os.Hostname()
	for name, ok := range map[string]bool{
		"max-jobs 4":                  c.MaxRunning == 4,
		"max-jobs-per-owner 2":        c.MaxRunningPerOwner == 2,
		"max-queued-jobs-per-owner 8": c.MaxQueuedPerOwner == 8,
		"keep-finished-jobs 7 days":   c.KeepFinished == 7*24*time.Hour,
		"job-lease 30 s":              c.Lease == 30*time.Second,
		"renewed every second":        c.Renew == time.Second,
		"job-attempts 3":              c.MaxAttempts == 3,
		"owner quota":                 c.OwnerQuota == DefaultOwnerQuota,
		"bucket reserve":              c.BucketReserve == DefaultBucketReserve,
		"a schedule clock":            c.ScheduleClock != nil && time.Since(c.ScheduleClock()) < time.Hour,
		"replica host/pid/suffix":     strings.HasPrefix(c.Replica, fmt.Sprintf("%s/%d/", host, os.Getpid())) && c.Replica != New(Config{}).cfg.Replica,
	} {
		if !ok {
			t.Errorf("default %s: %+v", name, c)
		}
	}
	set := New(Config{MaxRunning: 7, Lease: time.Minute, Renew: 3 * time.Second, Replica: "r1"})
	defer set.Runner.stop()
	if s := set.cfg; s.MaxRunning != 7 || s.MaxRunningPerOwner != 3 || s.Lease != time.Minute || s.Renew != 3*time.Second || s.Replica != "r1" {
		t.Errorf("set values: %+v; want them kept, per-owner half of max-jobs", s)
	}
	one := New(Config{MaxRunning: 1})
	defer one.Runner.stop()
	if one.cfg.MaxRunningPerOwner != 1 {
		t.Errorf("max-jobs 1: per owner %d, want 1", one.cfg.MaxRunningPerOwner)
	}
}

// TestRunningCountsOnlyRunning: a job waiting for a slot counts as
// queued, not running.
func TestRunningCountsOnlyRunning(t *testing.T) {
	st := newGated(enginetest.SQLite(t))
	h := newHarness(t, st, func(c *Config) { c.MaxRunning, c.MaxRunningPerOwner = 1, 1 })
	a, b := storetest.Owner("a"), storetest.Owner("b")
	fill(t, st.Store, a, 2)
	fill(t, st.Store, b, 2)
	if _, err := h.m.StartExport(t.Context(), "tester", exportReq(a, "")); err != nil {
		t.Fatal(err)
	}
	<-st.reached
	if _, err := h.m.StartExport(t.Context(), "tester", exportReq(b, "")); err != nil {
		t.Fatal(err)
	}
	if r, q := h.m.Runner.Running(), h.m.Runner.Queued(); r != 1 || q != 1 {
		t.Errorf("running %d, queued %d; want 1 and 1", r, q)
	}
	close(st.gate)
}

// TestNamesAtTheirLimits: an object key of 1024 bytes and a label of 128
// are taken; one byte more is refused.
func TestNamesAtTheirLimits(t *testing.T) {
	if err := CheckObjectKey(strings.Repeat("k", maxObjectKey)); err != nil {
		t.Errorf("a key of %d bytes: %v", maxObjectKey, err)
	}
	if err := CheckObjectKey(strings.Repeat("k", maxObjectKey+1)); err == nil {
		t.Errorf("a key of %d bytes taken", maxObjectKey+1)
	}
	if err := checkLabel(strings.Repeat("l", maxLabel)); err != nil {
		t.Errorf("a label of %d bytes: %v", maxLabel, err)
	}
	if err := checkLabel(strings.Repeat("l", maxLabel+1)); err == nil {
		t.Errorf("a label of %d bytes taken", maxLabel+1)
	}
}
