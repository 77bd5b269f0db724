-- +goose Up
-- jobs are the server-side exports and imports of BackupService: one row a
-- job, whatever its state. spec, progress and result are the job package's
-- own protobuf encodings (the start request without any key, the progress
-- metadata, the response); the store only keeps them. A running job's
-- server renews lease_until_ns; a running job whose lease has run out
-- belongs to a server that stopped, and is failed (ExpireJobs).
CREATE TABLE jobs (
    id               text    NOT NULL PRIMARY KEY,
    kind             text    NOT NULL,
    owner            text    NOT NULL,
    principal        text    NOT NULL,
    state            text    NOT NULL,
    spec             blob   NOT NULL,
    progress         blob   NOT NULL,
    result           blob   NOT NULL,
    error_code       integer NOT NULL DEFAULT 0,
    error_message    text    NOT NULL DEFAULT '',
    cancel_requested integer NOT NULL DEFAULT 0,
    lease_until_ns   bigint  NOT NULL,
    created_ns       bigint  NOT NULL,
    updated_ns       bigint  NOT NULL,
    done_ns          bigint  NOT NULL DEFAULT 0
);
-- At most one export job runs for an owner at a time.
CREATE UNIQUE INDEX jobs_one_running_export ON jobs (owner) WHERE kind = 'export' AND state = 'running';
CREATE INDEX jobs_by_owner ON jobs (owner, id);
CREATE INDEX jobs_running ON jobs (lease_until_ns) WHERE state = 'running';

-- +goose Down
DROP TABLE jobs;
