package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/contentbackup/contentbackup/internal/store"
)

func newJob(id, kind, owner string, lease time.Time) store.Job {
	now := time.Unix(0, time.Now().UnixNano())
	return store.Job{ID: id, Kind: kind, Owner: owner, Principal: "operator", State: store.JobRunning,
		Spec: []byte("spec:" + id), Progress: []byte{}, LeaseUntil: lease, Created: now, Updated: now}
}

func mustCreate(t *testing.T, s store.Store, j store.Job) {
	t.Helper()
	if err := s.CreateJob(ctx(t), j); err != nil {
		t.Fatalf("CreateJob %s: %v", j.ID, err)
	}
}

func testJobLifecycle(t *testing.T, s store.Store) {
	lease := time.Now().Add(time.Minute)
	j := newJob("0001", store.JobExport, "alice", lease)
	mustCreate(t, s, j)
	got, err := s.GetJob(ctx(t), "0001")
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "created job", fmt.Sprint(got.Kind, got.Owner, got.Principal, got.State, string(got.Spec), got.Done.IsZero(), got.CancelRequested),
		fmt.Sprint("export", "alice", "operator", "running", "spec:0001", true, false))
	if !got.LeaseUntil.Equal(lease) {
		t.Errorf("lease %v, want %v", got.LeaseUntil, lease)
	}
	if _, err := s.GetJob(ctx(t), "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetJob of a missing id: %v, want ErrNotFound", err)
	}
	if err := s.DeleteJob(ctx(t), "0001"); !errors.Is(err, store.ErrFailedPrecondition) {
		t.Errorf("DeleteJob of a running job: %v, want ErrFailedPrecondition", err)
	}

	cancel, err := s.RenewJob(ctx(t), "0001", 1, []byte("half"), lease.Add(time.Minute))
	if err != nil || cancel {
		t.Fatalf("RenewJob: cancel %v, %v", cancel, err)
	}
	if _, err := s.RequestCancel(ctx(t), "0001"); err != nil {
		t.Fatal(err)
	}
	cancel, err = s.RenewJob(ctx(t), "0001", 1, []byte("more"), lease.Add(time.Minute))
	if err != nil || !cancel {
		t.Fatalf("RenewJob after RequestCancel: cancel %v, %v; want true", cancel, err)
	}
	end := store.JobEnd{State: store.JobCancelled, Progress: []byte("last"), ErrorCode: 1, ErrorMessage: "cancelled", At: time.Now()}
	if err := s.FinishJob(ctx(t), "0001", 1, end); err != nil {
		t.Fatal(err)
	}
	got, _ = s.GetJob(ctx(t), "0001")
	equal(t, "finished job", fmt.Sprint(got.State, string(got.Progress), got.ErrorCode, got.ErrorMessage, got.Done.IsZero()),
		fmt.Sprint("cancelled", "last", 1, "cancelled", false))
	// A finished job keeps its end: a late runner or a second finish
	// cannot rewrite it, and renewing it tells the runner to stop.
	if err := s.FinishJob(ctx(t), "0001", 1, store.JobEnd{State: store.JobSucceeded, At: time.Now()}); !errors.Is(err, store.ErrFailedPrecondition) {
		t.Errorf("second FinishJob: %v, want ErrFailedPrecondition", err)
	}
	if _, err := s.RenewJob(ctx(t), "0001", 1, nil, lease); !errors.Is(err, store.ErrFailedPrecondition) {
		t.Errorf("RenewJob of a finished job: %v, want ErrFailedPrecondition", err)
	}
	if err := s.DeleteJob(ctx(t), "0001"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetJob(ctx(t), "0001"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetJob after DeleteJob: %v, want ErrNotFound", err)
	}
}

func testOneRunningExport(t *testing.T, s store.Store) {
	lease := time.Now().Add(time.Minute)
	mustCreate(t, s, newJob("0001", store.JobExport, "alice", lease))
	if err := s.CreateJob(ctx(t), newJob("0002", store.JobExport, "alice", lease)); !errors.Is(err, store.ErrJobConflict) {
		t.Fatalf("second running export of one owner: %v, want ErrJobConflict", err)
	}
	// Imports, and other owners' exports, run beside it.
	mustCreate(t, s, newJob("0003", store.JobImport, "alice", lease))
	mustCreate(t, s, newJob("0004", store.JobExport, "bob", lease))
	if err := s.CreateJob(ctx(t), newJob("0001", store.JobImport, "carol", lease)); err == nil || errors.Is(err, store.ErrJobConflict) {
		t.Errorf("a repeated id: %v, want an error other than ErrJobConflict", err)
	}
	if err := s.FinishJob(ctx(t), "0001", 1, store.JobEnd{State: store.JobSucceeded, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, newJob("0005", store.JobExport, "alice", lease))
}

func testExpireJobs(t *testing.T, s store.Store) {
	now := time.Now()
	mustCreate(t, s, newJob("0001", store.JobExport, "alice", now.Add(-time.Second)))
	mustCreate(t, s, newJob("0002", store.JobImport, "alice", now.Add(time.Minute)))
	mustCreate(t, s, newJob("0003", store.JobImport, "bob", now.Add(-time.Minute)))
	if err := s.FinishJob(ctx(t), "0003", 1, store.JobEnd{State: store.JobSucceeded, At: now}); err != nil {
		t.Fatal(err)
	}
	ids, err := s.ExpireJobs(ctx(t), now, 1, 14, "the server running it stopped")
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "expired ids", fmt.Sprint(ids), "[0001]")
	j, _ := s.GetJob(ctx(t), "0001")
	equal(t, "expired job", fmt.Sprint(j.State, j.ErrorCode, j.ErrorMessage), fmt.Sprint("failed", 14, "the server running it stopped"))
	// The runner that comes back late cannot overwrite the end.
	if err := s.FinishJob(ctx(t), "0001", 1, store.JobEnd{State: store.JobSucceeded, At: now}); !errors.Is(err, store.ErrFailedPrecondition) {
		t.Errorf("FinishJob of an expired job: %v, want ErrFailedPrecondition", err)
	}
	// Its owner may start a new export at once.
	mustCreate(t, s, newJob("0004", store.JobExport, "alice", now.Add(time.Minute)))
	if j, _ := s.GetJob(ctx(t), "0003"); j.State != store.JobSucceeded {
		t.Errorf("a finished job with an old lease became %s", j.State)
	}
}

// testClaimJob: a job whose lease ran out is taken over once per
// attempt left: the claim raises its attempt and lease, fences the
// runner that lost it (its renewals and its end are refused), and a job
// that has run its attempts is left to ExpireJobs.
func testClaimJob(t *testing.T, s store.Store) {
	now := time.Now()
	if _, err := s.ClaimJob(ctx(t), now, now.Add(time.Minute), 3); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ClaimJob with no job: %v, want ErrNotFound", err)
	}
	mustCreate(t, s, newJob("0001", store.JobExport, "alice", now.Add(-time.Second)))
	mustCreate(t, s, newJob("0002", store.JobImport, "alice", now.Add(time.Minute)))
	lease := time.Unix(0, now.Add(time.Minute).UnixNano())
	j, err := s.ClaimJob(ctx(t), now, lease, 3)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "claimed job", fmt.Sprint(j.ID, j.State, j.Attempt, j.LeaseUntil.Equal(lease), string(j.Spec)), fmt.Sprint("0001", "running", 2, true, "spec:0001"))
	// Its lease now runs: nothing else to claim, the live job included.
	if _, err := s.ClaimJob(ctx(t), now, lease, 3); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second ClaimJob: %v, want ErrNotFound", err)
	}
	// The first attempt's runner is fenced off; the second's is not.
	var lost *store.FenceLostError
	if _, err := s.RenewJob(ctx(t), "0001", 1, []byte("stale"), lease); !errors.As(err, &lost) || lost.Attempt != 1 || lost.Holder != 2 || !errors.Is(err, store.ErrFailedPrecondition) {
		t.Errorf("RenewJob by the attempt that lost the job: %v, want a FenceLostError (attempt 1, held by 2)", err)
	}
	if err := s.FinishJob(ctx(t), "0001", 1, store.JobEnd{State: store.JobSucceeded, At: now}); !errors.As(err, &lost) {
		t.Errorf("FinishJob by the attempt that lost the job: %v, want a FenceLostError", err)
	}
	if _, err := s.RenewJob(ctx(t), "0001", 2, []byte("going"), lease); err != nil {
		t.Errorf("RenewJob by the attempt that holds the job: %v", err)
	}
	// The second attempt dies too: a third is claimed, and then none; the
	// job is ExpireJobs' to fail.
	later := now.Add(2 * time.Minute)
	if j, err := s.ClaimJob(ctx(t), later, later.Add(time.Minute), 3); err != nil || j.ID != "0001" || j.Attempt != 3 {
		t.Fatalf("third attempt: %v %d, %v", j.ID, j.Attempt, err)
	}
	// By then 0002's lease has run out too, on its first attempt: it is
	// ExpireJobs' only once claims have used its attempts.
	muchLater := later.Add(2 * time.Minute)
	ids, err := s.ExpireJobs(ctx(t), muchLater, 3, 14, "stopped 3 times")
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "expired after the attempts", fmt.Sprint(ids), "[0001]")
	if j, _ := s.GetJob(ctx(t), "0002"); j.State != store.JobRunning || j.Attempt != 1 {
		t.Errorf("a job with attempts left: %s, attempt %d", j.State, j.Attempt)
	}
	if j, err := s.ClaimJob(ctx(t), muchLater, muchLater.Add(time.Minute), 3); err != nil || j.ID != "0002" {
		t.Errorf("ClaimJob past 0001's attempts: %s %d, %v; want 0002", j.ID, j.Attempt, err)
	}
}

// testClaimJobOnce: replicas claiming at once take each expired job once.
func testClaimJobOnce(t *testing.T, s store.Store) {
	now := time.Now()
	for i := range 6 {
		mustCreate(t, s, newJob(fmt.Sprintf("%04d", i), store.JobImport, "alice", now.Add(-time.Second)))
	}
	claims := make(chan string, 64)
	done := make(chan struct{})
	for range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for {
				j, err := s.ClaimJob(ctx(t), now, now.Add(time.Hour), 5)
				if errors.Is(err, store.ErrNotFound) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				claims <- j.ID
			}
		}()
	}
	for range 4 {
		<-done
	}
	close(claims)
	seen := map[string]int{}
	for id := range claims {
		seen[id]++
	}
	if len(seen) != 6 {
		t.Errorf("claimed %v, want each of 6 jobs", seen)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("job %s claimed %d times", id, n)
		}
	}
}

func testListJobs(t *testing.T, s store.Store) {
	lease := time.Now().Add(time.Minute)
	for i := range 7 {
		owner := "alice"
		if i%2 == 1 {
			owner = "bob"
		}
		mustCreate(t, s, newJob(fmt.Sprintf("%04d", i), store.JobImport, owner, lease))
	}
	var ids []string
	after := ""
	for {
		page, err := s.ListJobs(ctx(t), store.JobQuery{After: after, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page {
			ids = append(ids, j.ID)
		}
		if len(page) < 3 {
			break
		}
		after = page[len(page)-1].ID
	}
	equal(t, "every job in id order", fmt.Sprint(ids), "[0000 0001 0002 0003 0004 0005 0006]")
	bobs, err := s.ListJobs(ctx(t), store.JobQuery{Owner: "bob", After: "0001", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, j := range bobs {
		got = append(got, j.ID)
	}
	equal(t, "bob's jobs after 0001", fmt.Sprint(got), "[0003 0005]")
}

// testDeleteFinishedJobs: finished jobs older than the cut go, in
// batches; running and newer ones stay.
func testDeleteFinishedJobs(t *testing.T, s store.Store) {
	now := time.Now()
	lease := now.Add(time.Minute)
	for i, end := range []time.Duration{-3 * time.Hour, -2 * time.Hour, -90 * time.Minute, -time.Minute} {
		id := fmt.Sprintf("%04d", i)
		mustCreate(t, s, newJob(id, store.JobImport, "alice", lease))
		if err := s.FinishJob(ctx(t), id, 1, store.JobEnd{State: store.JobFailed, At: now.Add(end)}); err != nil {
			t.Fatal(err)
		}
	}
	mustCreate(t, s, newJob("0009", store.JobImport, "alice", lease)) // running
	cut := now.Add(-time.Hour)
	if n, err := s.DeleteFinishedJobs(ctx(t), cut, 2); err != nil || n != 2 {
		t.Fatalf("DeleteFinishedJobs = %d, %v; want 2 (the limit)", n, err)
	}
	if n, err := s.DeleteFinishedJobs(ctx(t), cut, 2); err != nil || n != 1 {
		t.Fatalf("DeleteFinishedJobs again = %d, %v; want 1", n, err)
	}
	left, err := s.ListJobs(ctx(t), store.JobQuery{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, j := range left {
		ids = append(ids, j.ID)
	}
	equal(t, "jobs left", fmt.Sprint(ids), "[0003 0009]")
}

// testJobRequestIDs: a job started with a request id the owner's jobs of
// its kind hold already is ErrRequestSeen, and GetJobByRequest finds the
// first; another owner, kind or id is a job of its own; jobs without a
// request id never conflict.
func testJobRequestIDs(t *testing.T, s store.Store) {
	now := time.Now()
	first := newJob("11111111111111111111111111111111", store.JobImport, "o", now.Add(time.Minute))
	first.RequestID = "req-1"
	mustCreate(t, s, first)
	again := newJob("22222222222222222222222222222222", store.JobImport, "o", now.Add(time.Minute))
	again.RequestID = "req-1"
	if err := s.CreateJob(ctx(t), again); !errors.Is(err, store.ErrRequestSeen) {
		t.Fatalf("a second job with the request id: %v; want ErrRequestSeen", err)
	}
	got, err := s.GetJobByRequest(ctx(t), "o", store.JobImport, "req-1")
	if err != nil || got.ID != first.ID || got.RequestID != "req-1" {
		t.Errorf("GetJobByRequest: %+v, %v; want the first job", got, err)
	}
	for i, j := range []store.Job{
		newJob("33333333333333333333333333333333", store.JobImport, "other", now.Add(time.Minute)),
		newJob("44444444444444444444444444444444", store.JobExport, "o", now.Add(time.Minute)),
	} {
		j.RequestID = "req-1"
		if err := s.CreateJob(ctx(t), j); err != nil {
			t.Errorf("job %d with the request id under another owner or kind: %v", i, err)
		}
	}
	mustCreate(t, s, newJob("55555555555555555555555555555555", store.JobImport, "o", now.Add(time.Minute)))
	mustCreate(t, s, newJob("66666666666666666666666666666666", store.JobImport, "o", now.Add(time.Minute)))
	if _, err := s.GetJobByRequest(ctx(t), "o", store.JobImport, "req-2"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("an unknown request id: %v; want ErrNotFound", err)
	}
	if _, err := s.GetJobByRequest(ctx(t), "o", store.JobImport, ""); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("an empty request id: %v; want ErrNotFound", err)
	}
}
