-- +goose Up
-- A backup's last read-back: when (0: never) and what it found wrong (''
-- when every record authenticated and the object matched the catalog).
ALTER TABLE backups ADD COLUMN verified_ns bigint NOT NULL DEFAULT 0;
ALTER TABLE backups ADD COLUMN verify_problem text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE backups DROP COLUMN verify_problem;
ALTER TABLE backups DROP COLUMN verified_ns;
