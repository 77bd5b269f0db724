package main

import (
	"reflect"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/contentbackup/contentbackup/internal/jobs"
	"github.com/contentbackup/contentbackup/internal/server"
)

// TestLimitFlagDefaultsAreTheServers: every limit flag's default is the
// server's own default (RELIABILITY.md lists one value for each), so a
// server started with no flags runs under the documented limits.
func TestLimitFlagDefaultsAreTheServers(t *testing.T) {
	var f struct{ limitFlags }
	parser, err := kong.New(&f, flagDefaults(), kong.Exit(func(int) { t.Fatal("kong exited") }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parser.Parse(nil); err != nil {
		t.Fatal(err)
	}
	got := f.limits(server.DefaultLimits.CallExpandBytes)
	want := server.DefaultLimits
	if !reflect.DeepEqual(got, want) {
		t.Errorf("flags give\n%+v\nthe server's defaults are\n%+v", got, want)
	}
}

// TestJobFlagDefaultsAreTheJobs: every job flag's default is the jobs
// manager's own (jobs.DefaultConfig), which the flags take rather than
// repeat, so a server started with no flags runs jobs as a Config that
// sets nothing does.
func TestJobFlagDefaultsAreTheJobs(t *testing.T) {
	var f struct{ jobFlags }
	parser, err := kong.New(&f, flagDefaults(), kong.Exit(func(int) { t.Fatal("kong exited") }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parser.Parse(nil); err != nil {
		t.Fatal(err)
	}
	d := jobs.DefaultConfig
	got := jobs.Config{MaxRunning: f.MaxJobs, MaxRunningPerOwner: f.MaxJobsPerOwner, MaxQueuedPerOwner: f.MaxQueuedJobsPerOwner,
		KeepFinished: f.KeepFinishedJobs, Lease: f.JobLease, OwnerQuota: f.OwnerBackupQuota, BucketReserve: f.BucketReserve, MaxAttempts: f.JobAttempts}
	want := jobs.Config{MaxRunning: d.MaxRunning, MaxRunningPerOwner: max(d.MaxRunning/2, 1), MaxQueuedPerOwner: d.MaxQueuedPerOwner,
		KeepFinished: d.KeepFinished, Lease: d.Lease, OwnerQuota: d.OwnerQuota, BucketReserve: d.BucketReserve, MaxAttempts: d.MaxAttempts}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("flags give\n%+v\nthe jobs' defaults are\n%+v", got, want)
	}
}
