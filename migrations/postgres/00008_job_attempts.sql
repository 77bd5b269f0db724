-- +goose Up
-- attempt counts a job's runs: 1 when started, one more each time another
-- replica takes over a job whose lease ran out. Renewals and the end are
-- written only by the attempt that holds the job, so a runner that lost
-- it can no longer touch it.
ALTER TABLE jobs ADD COLUMN attempt integer NOT NULL DEFAULT 1;

-- +goose Down
ALTER TABLE jobs DROP COLUMN attempt;
