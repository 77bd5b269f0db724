package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/contentbackup/contentbackup/internal/store"
)

const jobColumns = `id, kind, owner, principal, state, spec, progress, result, error_code, error_message, cancel_requested, lease_until_ns, created_ns, updated_ns, done_ns, request_id, attempt, source_owner`

type jobRow struct {
	store.Job
	cancel                                int64
	leaseNs, createdNs, updatedNs, doneNs int64
}

func (r *jobRow) dest() []any {
	return []any{&r.ID, &r.Kind, &r.Owner, &r.Principal, &r.State, &r.Spec, &r.Progress, &r.Result,
		&r.ErrorCode, &r.ErrorMessage, &r.cancel, &r.leaseNs, &r.createdNs, &r.updatedNs, &r.doneNs, &r.RequestID, &r.Attempt, &r.SourceOwner}
}

func (r *jobRow) job() store.Job {
	j := r.Job
	j.CancelRequested = r.cancel != 0
	j.LeaseUntil = time.Unix(0, r.leaseNs)
	j.Created = time.Unix(0, r.createdNs)
	j.Updated = time.Unix(0, r.updatedNs)
	if r.doneNs != 0 {
		j.Done = time.Unix(0, r.doneNs)
	}
	return j
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// uniqueViolation reports a unique constraint refusing a row: Postgres's
// 23505, SQLite's SQLITE_CONSTRAINT (read through the drivers' small
// interfaces, so no driver import).
func uniqueViolation(err error) bool {
	var pg interface{ SQLState() string }
	if errors.As(err, &pg) {
		return pg.SQLState() == "23505"
	}
	var coded interface{ Code() int }
	if errors.As(err, &coded) {
		return coded.Code()&0xff == 19
	}
	return false
}

func (s jobsSQL) CreateJob(ctx context.Context, j store.Job) error {
	source := j.SourceOwner
	if source == j.Owner {
		source = ""
	}
	q := s.d.bind(`INSERT INTO jobs (` + jobColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	var insertErr error
	err := s.db.Write(ctx, func(tx Conn) error {
		if err := s.erasureFence(ctx, tx, j.Kind, j.Owner, source); err != nil {
			return err
		}
		_, insertErr = tx.Exec(ctx, q, j.ID, j.Kind, j.Owner, j.Principal, j.State, nonNil(j.Spec), nonNil(j.Progress), nonNil(j.Result),
			j.ErrorCode, j.ErrorMessage, boolInt(j.CancelRequested), j.LeaseUntil.UnixNano(), j.Created.UnixNano(), j.Updated.UnixNano(), unixOrZero(j.Done), j.RequestID,
			max(j.Attempt, 1), source)
		return insertErr
	})
	if errors.Is(err, store.ErrOwnerErasing) {
		return err
	}
	if uniqueViolation(err) && j.RequestID != "" {
		if _, gerr := s.GetJobByRequest(ctx, j.Owner, j.Kind, j.RequestID); gerr == nil {
			return fmt.Errorf("request %.64q: %w", j.RequestID, store.ErrRequestSeen)
		}
	}
	if uniqueViolation(err) {
		if j.Kind == store.JobExport {
			if _, gerr := s.GetJob(ctx, j.ID); errors.Is(gerr, store.ErrNotFound) {
				return fmt.Errorf("job for owner %.64q: %w", j.Owner, store.ErrJobConflict)
			}
		}
		return fmt.Errorf("%s: job %s exists: %w", s.d.Name, j.ID, store.ErrFailedPrecondition)
	}
	if err != nil {
		return fmt.Errorf("%s: create job: %w", s.d.Name, err)
	}
	return nil
}

// erasureFence checks, in the transaction that stores a job of kind for
// owner (reading source's backups, when not ""), that no job starts for
// an owner an erasure runs for: a job whose owner or source an erasure
// is running for is ErrOwnerErasing. An erasure itself is stored whatever
// runs, and stops what ran before it (RunningJobsFor). The owners' keys
// are locked first, in order, so two such transactions run one after the
// other and the second sees what the first stored: a job is either
// stored before the erasure, and in the list it stops, or refused (issue
// 46, findings 2 and 3: an export started during an erasure wrote a new
// readable backup; an import from the owner's backup into another kept
// its messages).
func (s jobsSQL) erasureFence(ctx context.Context, tx Conn, kind, owner, source string) error {
	if kind == store.JobEraseDryRun {
		return nil
	}
	owners := []string{owner}
	if source != "" {
		owners = append(owners, source)
		slices.Sort(owners)
	}
	if s.d.LockKey != "" {
		for _, o := range owners {
			if _, err := tx.Exec(ctx, s.d.LockKey, "erasure fence: "+o); err != nil {
				return fmt.Errorf("lock the owner's erasure fence: %w", err)
			}
		}
	}
	if kind == store.JobErase {
		return nil
	}
	var id string
	err := tx.QueryRow(ctx, s.d.bind(`SELECT id FROM jobs WHERE state = ? AND kind = ? AND owner IN (?, ?) LIMIT 1`),
		store.JobRunning, store.JobErase, owners[0], owners[len(owners)-1]).Scan(&id)
	if err == nil {
		return fmt.Errorf("erasure %s: %w", id, store.ErrOwnerErasing)
	}
	if !errors.Is(err, s.d.NoRows) {
		return fmt.Errorf("read the owner's erasure fence: %w", err)
	}
	return nil
}

// RunningJobsFor is store.Erasure's.
func (s jobsSQL) RunningJobsFor(ctx context.Context, owner string) ([]string, error) {
	var ids []string
	err := s.db.Read().Query(ctx, s.d.bind(`SELECT id FROM jobs WHERE state = ? AND kind NOT IN (?, ?) AND (owner = ? OR source_owner = ?) ORDER BY id`),
		[]any{store.JobRunning, store.JobErase, store.JobEraseDryRun, owner, owner}, scanIDs(&ids))
	if err != nil {
		return nil, fmt.Errorf("%s: the owner's running jobs: %w", s.d.Name, err)
	}
	return ids, nil
}

// RunningErasure is store.Erasure's.
func (s jobsSQL) RunningErasure(ctx context.Context, owner string) (string, error) {
	var id string
	err := s.db.Read().QueryRow(ctx, s.d.bind(`SELECT id FROM jobs WHERE state = ? AND kind = ? AND owner = ? LIMIT 1`),
		store.JobRunning, store.JobErase, owner).Scan(&id)
	if errors.Is(err, s.d.NoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("%s: read the owner's erasure: %w", s.d.Name, err)
	}
	return id, nil
}

// exec runs one write statement in a transaction of its own (SQLite's
// read connections are query-only).
func (s sqlBase) exec(ctx context.Context, query string, args ...any) (n int64, err error) {
	err = s.db.Write(ctx, func(tx Conn) error {
		n, err = tx.Exec(ctx, query, args...)
		return err
	})
	return n, err
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func unixOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func (s jobsSQL) GetJob(ctx context.Context, id string) (store.Job, error) {
	return s.getJob(ctx, s.db.Read(), id, "")
}

func (s jobsSQL) GetJobByRequest(ctx context.Context, owner, kind, requestID string) (store.Job, error) {
	if requestID == "" {
		return store.Job{}, fmt.Errorf("no request id: %w", store.ErrNotFound)
	}
	var r jobRow
	err := s.db.Read().QueryRow(ctx, s.d.bind(`SELECT `+jobColumns+` FROM jobs WHERE owner = ? AND kind = ? AND request_id = ?`), owner, kind, requestID).Scan(r.dest()...)
	if errors.Is(err, s.d.NoRows) {
		return store.Job{}, fmt.Errorf("request %.64q: %w", requestID, store.ErrNotFound)
	}
	if err != nil {
		return store.Job{}, fmt.Errorf("%s: read job: %w", s.d.Name, err)
	}
	return r.job(), nil
}

func (s sqlBase) getJob(ctx context.Context, c Conn, id, lock string) (store.Job, error) {
	var r jobRow
	err := c.QueryRow(ctx, s.d.bind(`SELECT `+jobColumns+` FROM jobs WHERE id = ?`)+lock, id).Scan(r.dest()...)
	if errors.Is(err, s.d.NoRows) {
		return store.Job{}, fmt.Errorf("job %.64q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Job{}, fmt.Errorf("%s: read job: %w", s.d.Name, err)
	}
	return r.job(), nil
}

func (s jobsSQL) ListJobs(ctx context.Context, q store.JobQuery) ([]store.Job, error) {
	var where []string
	var args []any
	if q.Owner != "" {
		where = append(where, "owner = ?")
		args = append(args, q.Owner)
	}
	if q.After != "" {
		where = append(where, "id > ?")
		args = append(args, q.After)
	}
	query := `SELECT ` + jobColumns + ` FROM jobs`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	query += ` ORDER BY id LIMIT ?`
	args = append(args, q.Limit)
	var out []store.Job
	err := s.db.Read().Query(ctx, s.d.bind(query), args, func(rows Rows) error {
		for rows.Next() {
			var r jobRow
			if err := rows.Scan(r.dest()...); err != nil {
				return err
			}
			out = append(out, r.job())
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("%s: list jobs: %w", s.d.Name, err)
	}
	return out, nil
}

func (s jobsSQL) RenewJob(ctx context.Context, id string, attempt int, progress []byte, leaseUntil time.Time) (bool, error) {
	var cancel int64
	err := s.db.Write(ctx, func(tx Conn) error {
		j, err := s.getJob(ctx, tx, id, s.d.ForUpdate)
		if err != nil {
			return err
		}
		if j.State != store.JobRunning || j.Attempt != attempt {
			return &store.FenceLostError{Job: id, Attempt: attempt, Holder: j.Attempt, State: j.State}
		}
		cancel = boolInt(j.CancelRequested)
		_, err = tx.Exec(ctx, s.d.bind(`UPDATE jobs SET progress = ?, lease_until_ns = ?, updated_ns = ? WHERE id = ?`),
			nonNil(progress), leaseUntil.UnixNano(), time.Now().UnixNano(), id)
		if err != nil {
			return fmt.Errorf("%s: renew job: %w", s.d.Name, err)
		}
		return nil
	})
	return cancel != 0, err
}

func (s jobsSQL) FinishJob(ctx context.Context, id string, attempt int, end store.JobEnd) error {
	n, err := s.exec(ctx, s.d.bind(`UPDATE jobs SET state = ?, progress = ?, result = ?, error_code = ?, error_message = ?, updated_ns = ?, done_ns = ? WHERE id = ? AND state = ? AND attempt = ?`),
		end.State, nonNil(end.Progress), nonNil(end.Result), end.ErrorCode, end.ErrorMessage, end.At.UnixNano(), end.At.UnixNano(), id, store.JobRunning, attempt)
	if err != nil {
		return fmt.Errorf("%s: finish job: %w", s.d.Name, err)
	}
	if n == 0 {
		j, err := s.GetJob(ctx, id)
		if err != nil {
			return err
		}
		return &store.FenceLostError{Job: id, Attempt: attempt, Holder: j.Attempt, State: j.State}
	}
	return nil
}

func (s jobsSQL) RequestCancel(ctx context.Context, id string) (store.Job, error) {
	if _, err := s.exec(ctx, s.d.bind(`UPDATE jobs SET cancel_requested = 1, updated_ns = ? WHERE id = ? AND state = ?`),
		time.Now().UnixNano(), id, store.JobRunning); err != nil {
		return store.Job{}, fmt.Errorf("%s: cancel job: %w", s.d.Name, err)
	}
	return s.GetJob(ctx, id)
}

func (s jobsSQL) DeleteJob(ctx context.Context, id string) error {
	return s.db.Write(ctx, func(tx Conn) error {
		j, err := s.getJob(ctx, tx, id, s.d.ForUpdate)
		if err != nil {
			return err
		}
		if j.State == store.JobRunning {
			return fmt.Errorf("job %s is running; cancel it first: %w", id, store.ErrFailedPrecondition)
		}
		if _, err := tx.Exec(ctx, s.d.bind(`DELETE FROM jobs WHERE id = ?`), id); err != nil {
			return fmt.Errorf("%s: delete job: %w", s.d.Name, err)
		}
		return nil
	})
}

func (s jobsSQL) ClaimJob(ctx context.Context, now, leaseUntil time.Time, maxAttempts int) (store.Job, error) {
	var claimed store.Job
	err := s.db.Write(ctx, func(tx Conn) error {
		var id string
		var attempt int
		err := tx.QueryRow(ctx, s.d.bind(LeaseRunOut+s.d.ForUpdate+s.d.SkipLocked),
			store.JobRunning, now.UnixNano(), maxAttempts).Scan(&id, &attempt)
		if errors.Is(err, s.d.NoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("%s: claim job: %w", s.d.Name, err)
		}
		// The attempt in the WHERE clause settles a race with a replica
		// that read the same row without the lock (SQLite has none).
		n, err := tx.Exec(ctx, s.d.bind(`UPDATE jobs SET attempt = ?, lease_until_ns = ?, updated_ns = ? WHERE id = ? AND state = ? AND attempt = ?`),
			attempt+1, leaseUntil.UnixNano(), now.UnixNano(), id, store.JobRunning, attempt)
		if err != nil {
			return fmt.Errorf("%s: claim job: %w", s.d.Name, err)
		}
		if n == 0 {
			return store.ErrNotFound
		}
		claimed, err = s.getJob(ctx, tx, id, "")
		return err
	})
	return claimed, err
}

func (s jobsSQL) ExpireJobs(ctx context.Context, now time.Time, maxAttempts int, code int32, message string) ([]string, error) {
	var ids []string
	err := s.db.Write(ctx, func(tx Conn) error {
		ids = ids[:0]
		err := tx.Query(ctx, s.d.bind(LeasesPastAttempts+s.d.ForUpdate), []any{store.JobRunning, now.UnixNano(), maxAttempts}, scanIDs(&ids))
		if err != nil {
			return fmt.Errorf("%s: expired jobs: %w", s.d.Name, err)
		}
		for _, id := range ids {
			if _, err := tx.Exec(ctx, s.d.bind(`UPDATE jobs SET state = ?, error_code = ?, error_message = ?, updated_ns = ?, done_ns = ? WHERE id = ? AND state = ?`),
				store.JobFailed, code, message, now.UnixNano(), now.UnixNano(), id, store.JobRunning); err != nil {
				return fmt.Errorf("%s: expire job: %w", s.d.Name, err)
			}
		}
		return nil
	})
	return ids, err
}

func (s jobsSQL) DeleteFinishedJobs(ctx context.Context, before time.Time, limit int) (int, error) {
	// jobs_finished's predicate as constants, so both planners can use
	// it: the sweep reads the jobs due, not every one kept (issue 52).
	n, err := s.exec(ctx, s.d.bind(`DELETE FROM jobs WHERE id IN (`+FinishedJobsDue+`)`),
		before.UnixNano(), limit)
	if err != nil {
		return 0, fmt.Errorf("%s: delete finished jobs: %w", s.d.Name, err)
	}
	return int(n), nil
}

// scanIDs appends each row's one text column to ids.
func scanIDs(ids *[]string) func(Rows) error {
	return func(rows Rows) error {
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			*ids = append(*ids, id)
		}
		return rows.Err()
	}
}
