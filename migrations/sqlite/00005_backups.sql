-- +goose Up
-- backups is the backup catalog: one row a backup object the server wrote
-- for an owner. The server chose the object's location (a prefix of the
-- owner's own); a request names a backup by (owner, id), never by a key
-- in a bucket, so an object the catalog does not hold is never imported,
-- listed or deleted as a backup. wrapped_key is the backup's own 32-byte
-- archive key, encrypted by the server's key-encryption key. options is
-- the ArchiveOptions encoding the export ran with.
CREATE TABLE backups (
    owner          text    NOT NULL,
    id             text    NOT NULL,
    state          text    NOT NULL,
    label          text    NOT NULL DEFAULT '',
    bucket         text    NOT NULL,
    object_key     text    NOT NULL,
    job_id         text    NOT NULL DEFAULT '',
    schedule       text    NOT NULL DEFAULT '',
    principal      text    NOT NULL DEFAULT '',
    options        blob   NOT NULL,
    wrapped_key    blob   NOT NULL,
    groups         bigint  NOT NULL DEFAULT 0,
    messages       bigint  NOT NULL DEFAULT 0,
    consent        bigint  NOT NULL DEFAULT 0,
    length         bigint  NOT NULL DEFAULT 0,
    sha256         blob   NOT NULL,
    exported_at_ns bigint  NOT NULL DEFAULT 0,
    created_ns     bigint  NOT NULL,
    completed_ns   bigint  NOT NULL DEFAULT 0,
    PRIMARY KEY (owner, id)
);
-- Retention reads one schedule's backups of one owner.
CREATE INDEX backups_by_schedule ON backups (owner, schedule, id);

-- +goose Down
DROP TABLE backups;
