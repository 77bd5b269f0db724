package jobs

import (
	"context"

	"google.golang.org/protobuf/proto"

	pv "github.com/contentbackup/contentbackup/api/contentbackup/persistence/v1"
	"github.com/contentbackup/contentbackup/internal/store"
)

// The runner (runner.go) owns what every job shares: slots, the lease and
// its renewal, takeover, attempts and the fence, cancellation, and the
// end. A job kind owns the rest, in one file: how a job of it is started
// and prepared, its body, and what it leaves behind. Adding a kind is a
// file with a type that implements jobKind and a task for its jobs, and a
// line in New that registers it (docs/architecture.md walks through one).

// A jobKind is one kind of job, as the runner sees it between its jobs.
type jobKind interface {
	// again reads what job j, taken over from a replica that stopped,
	// needs to run again: its request from its spec, and what its start
	// prepared, as a start would find it now.
	again(ctx context.Context, j store.Job) (task, error)
	// leftBehind says what a job of this kind that stopped part-way
	// leaves, after why it stopped ("; nothing was committed").
	leftBehind(validateOnly bool) string
	// expired cleans up after job j, failed for good because its servers
	// stopped on every attempt.
	expired(ctx context.Context, j store.Job)
}

// A task is one job of some kind, ready to run: what its start (or its
// takeover) prepared.
type task interface {
	// kind is the job's kind as the store keeps it (store.JobExport, ...).
	kind() string
	owner() string
	requestID() string
	// spec is the request as the job's row keeps it, for again to read.
	spec() ([]byte, error)
	// describe fills in what the job's row and operation show of this
	// kind, beyond what the runner sets.
	describe(md *pv.JobProgress, j *store.Job)
	// stored runs once the job's row is stored, before the body; an error
	// ends the job unstarted.
	stored(ctx context.Context, j store.Job) error
	// run is the job's body. Its result is the operation's response.
	run(ctx context.Context, a *Attempt) (proto.Message, error)
	// settle runs after a body that failed, before the end is recorded,
	// fenced by the attempt; never after the attempt lost the job.
	settle(ctx context.Context, a *Attempt)
	// ended runs once the end is recorded.
	ended(ctx context.Context, a *Attempt, end store.JobEnd, err error)
}

// taskHooks are the hooks a kind with nothing to add leaves empty.
type taskHooks struct{}

func (taskHooks) stored(context.Context, store.Job) error              { return nil }
func (taskHooks) settle(context.Context, *Attempt)                     {}
func (taskHooks) ended(context.Context, *Attempt, store.JobEnd, error) {}

// kindDeps is what every kind works with.
type kindDeps struct {
	cfg     *Config
	catalog *Catalog
	keys    *Keys
	runner  *Runner
}
