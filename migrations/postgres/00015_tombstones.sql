-- +goose Up
-- What a write removed from an owner's exportable state, so a restore of
-- a chain of backups is the snapshot its newest member saw (ARCH-013,
-- ARCH-014: import can add, never remove). A deleted message leaves its
-- group, send time and id; a group that stopped being exportable (turned
-- into a sync or one-shot conversation) leaves its id with sent_at_ns at
-- the smallest bigint and an empty id. change_seq is the owner's change
-- sequence of the removing write: a chain member whose snapshot came
-- before it held the record, a later one did not. Rows at or below the
-- change sequence of the owner's oldest complete backup are pruned once
-- an export completes: no restore can need them.
CREATE TABLE tombstones (
    owner      text   NOT NULL,
    group_id   bytea  NOT NULL,
    sent_at_ns bigint NOT NULL,
    id         bytea  NOT NULL,
    change_seq bigint NOT NULL,
    PRIMARY KEY (owner, group_id, sent_at_ns, id, change_seq)
);
CREATE INDEX tombstones_by_change ON tombstones (owner, change_seq);

-- A restore in replace mode rewrites an owner's records to a snapshot,
-- deleting what the snapshot lacks, consent records included, which leave
-- no tombstone. base_floor is the owner's change sequence when the last
-- such restore began and when it ended: no backup below it may be the
-- base of an increment (a chain across a replace would restore what the
-- replace deleted), so the next backup is a full one.
ALTER TABLE owner_changes ADD COLUMN base_floor bigint NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE owner_changes DROP COLUMN base_floor;
DROP TABLE tombstones;
