-- +goose Up
-- An import job names, besides the owner it writes, the owner whose
-- backup it reads when that is another (source_owner; '' when the same).
-- An erasure fences both: no export or import of an owner, and no import
-- from its backups, starts while it is erased, and no erasure starts while
-- one runs (CreateJob checks and inserts in one transaction, under an
-- advisory lock on each owner named).
ALTER TABLE jobs ADD COLUMN source_owner text NOT NULL DEFAULT '';
CREATE INDEX jobs_running_by_source ON jobs (source_owner) WHERE state = 'running' AND source_owner <> '';

-- +goose Down
DROP INDEX jobs_running_by_source;
ALTER TABLE jobs DROP COLUMN source_owner;
