-- +goose Up
-- jobs_finished: the sweep of finished jobs past --keep-finished-jobs
-- reads those due, oldest first, from an index led by when they ended.
-- It read every finished job kept (and every erasure's record, kept for
-- good) to find the few past their time, on every replica, every sweep
-- (issue 52). The predicate is the sweep's, written as constants there.
CREATE INDEX jobs_finished ON jobs (done_ns) WHERE state <> 'running' AND kind <> 'erase' AND done_ns > 0;

-- +goose Down
DROP INDEX jobs_finished;
