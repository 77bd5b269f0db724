-- +goose Up
-- owner_keys holds each owner's own key (32 bytes), wrapped by a
-- key-encryption key whose fingerprint kek_fingerprint is; each backup's
-- data key is sealed by its owner's key (backups.owner_key_id names
-- which). Erasing an owner deletes its row here first: from then on no
-- data key of the owner opens, whatever copy of an object or a catalog
-- row survives. key_id is random and new for every key, so an owner name
-- used again after an erasure gets a key no old row names. A KEK
-- rotation rewraps these rows only.
CREATE TABLE owner_keys (
    owner           TEXT   NOT NULL PRIMARY KEY,
    key_id          TEXT   NOT NULL,
    wrapped_key     BLOB   NOT NULL,
    kek_fingerprint TEXT   NOT NULL,
    created_ns      INTEGER NOT NULL,
    rewrapped_ns    INTEGER NOT NULL DEFAULT 0
);
-- Rotation and the key status read the rows by the KEK that wraps them.
CREATE INDEX owner_keys_by_kek ON owner_keys (kek_fingerprint, owner);

-- '' for a row whose data key is wrapped by the KEK itself (written
-- before owner keys; the key worker rewraps those).
ALTER TABLE backups ADD COLUMN owner_key_id TEXT NOT NULL DEFAULT '';
CREATE INDEX backups_by_owner_key ON backups (owner_key_id, owner, id);

-- A legal hold on an owner (backup_id '') or on one of its backups: a
-- held backup is not deleted (DeleteBackup, retention) and a held owner
-- is not erased, until the hold is released or until_ns (0: none) has
-- passed.
CREATE TABLE holds (
    owner      TEXT   NOT NULL,
    backup_id  TEXT   NOT NULL DEFAULT '',
    reason     TEXT   NOT NULL,
    principal  TEXT   NOT NULL,
    created_ns INTEGER NOT NULL,
    until_ns   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (owner, backup_id)
);

-- +goose Down
DROP TABLE holds;
DROP INDEX backups_by_owner_key;
ALTER TABLE backups DROP COLUMN owner_key_id;
DROP TABLE owner_keys;
