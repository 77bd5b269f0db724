package jobs

import (
	"sync/atomic"

	"google.golang.org/protobuf/proto"

	pv "github.com/contentbackup/contentbackup/api/contentbackup/persistence/v1"
	"github.com/contentbackup/contentbackup/internal/store"
)

// Attempt is what a job's body sees of the attempt that runs it, as a
// Temporal activity sees its info and heartbeat: the job as stored, the
// fence its side effects carry, and the progress it reports (phase,
// bytes, records). The runner renews the lease and writes the progress
// back; a body never touches the job table.
type Attempt struct {
	job  store.Job
	meta *pv.JobProgress // set before the body runs; read-only after
	// bytes and records are what the body has moved so far; recordsDone,
	// once set, is the final count, which replaces records.
	bytes, records, recordsDone atomic.Uint64
	phase                       atomic.Int32
}

func newAttempt(j store.Job, md *pv.JobProgress) *Attempt {
	a := &Attempt{job: j, meta: md}
	a.phase.Store(int32(md.GetPhase()))
	return a
}

// Job is the job as stored when this attempt began.
func (a *Attempt) Job() store.Job { return a.job }

// Fence is the token every side effect of this attempt carries: the store
// refuses it once another attempt holds the job (store.FenceLostError).
func (a *Attempt) Fence() store.Fence { return store.Fence{JobID: a.job.ID, Attempt: a.job.Attempt} }

// SetPhase reports the phase the body is in.
func (a *Attempt) SetPhase(p pv.JobPhase) { a.phase.Store(int32(p)) }

// Bytes counts the archive bytes moved; a body adds to it as it goes.
func (a *Attempt) Bytes() *atomic.Uint64 { return &a.bytes }

// Records counts the records moved so far.
func (a *Attempt) Records() *atomic.Uint64 { return &a.records }

// Done reports the final count of records, once the body knows it.
func (a *Attempt) Done(records uint64) { a.recordsDone.Store(records) }

// validateOnly: the job changes nothing (an import's dry run, an
// erasure's).
func (a *Attempt) validateOnly() bool { return a.meta.GetValidateOnly() }

// progress is the job's progress as the store keeps it.
func (a *Attempt) progress() []byte {
	md := proto.Clone(a.meta).(*pv.JobProgress)
	md.BytesDone = a.bytes.Load()
	md.RecordsDone = a.records.Load()
	if done := a.recordsDone.Load(); done != 0 {
		md.RecordsDone = done
	}
	md.Phase = pv.JobPhase(a.phase.Load())
	b, _ := proto.Marshal(md)
	return b
}
