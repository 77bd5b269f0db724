-- +goose Up
-- request_id is the client's id for a job's start (AIP-155): a start that
-- repeats one of the owner's kept jobs' ids returns that job.
ALTER TABLE jobs ADD COLUMN request_id text NOT NULL DEFAULT '';
CREATE UNIQUE INDEX jobs_by_request ON jobs (owner, kind, request_id) WHERE request_id <> '';

-- +goose Down
DROP INDEX jobs_by_request;
ALTER TABLE jobs DROP COLUMN request_id;
