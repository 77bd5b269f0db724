-- +goose Up
-- The change sequence behind incremental backups. owner_changes holds each
-- owner's counter; every write transaction that adds or changes an owner's
-- group, message or consent record raises it by one first (its row lock
-- orders that owner's writers, so a sequence number is committed before
-- the next is handed out) and stamps the rows it writes with the new
-- value. A snapshot reads the counter with the rows, so "every record with
-- change_seq above what a backup saw" is exactly what changed since it,
-- whatever the records' sent_at_ns. Rows written before this migration
-- keep 0, which a backup taken after it has seen.
CREATE TABLE owner_changes (
    owner text   NOT NULL PRIMARY KEY,
    seq   bigint NOT NULL
);
ALTER TABLE groups   ADD COLUMN change_seq bigint NOT NULL DEFAULT 0;
ALTER TABLE messages ADD COLUMN change_seq bigint NOT NULL DEFAULT 0;
ALTER TABLE consent  ADD COLUMN change_seq bigint NOT NULL DEFAULT 0;
-- An increment reads a group's messages changed since its base, and asks
-- which groups have any.
CREATE INDEX messages_changes ON messages (owner, group_id, change_seq);

-- A backup's place in a chain: base_id is the backup an increment holds
-- the changes since ('' for a full backup), change_seq the owner's change
-- sequence its snapshot saw (-1: written before changes were tracked, so
-- no increment can build on it).
ALTER TABLE backups ADD COLUMN base_id text NOT NULL DEFAULT '';
ALTER TABLE backups ADD COLUMN change_seq bigint NOT NULL DEFAULT -1;
CREATE INDEX backups_by_base ON backups (owner, base_id);

-- +goose Down
DROP INDEX backups_by_base;
ALTER TABLE backups DROP COLUMN change_seq;
ALTER TABLE backups DROP COLUMN base_id;
DROP INDEX messages_changes;
ALTER TABLE consent  DROP COLUMN change_seq;
ALTER TABLE messages DROP COLUMN change_seq;
ALTER TABLE groups   DROP COLUMN change_seq;
DROP TABLE owner_changes;
