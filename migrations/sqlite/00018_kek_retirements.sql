-- +goose Up
-- kek_retirements is what erasures need of the key-encryption keys: each
-- erasure records the KEK that wrapped the owner key it destroyed (one
-- row per KEK and erasure job). The deleted owner-key row lives on in
-- the database files (free pages, the WAL) wrapped by that KEK, so the
-- erasure is complete only once the KEK itself is gone: retired_ns is
-- when no new row may be wrapped under it (CreateOwnerKey and
-- RewrapOwnerKey refuse it, under an advisory lock on the fingerprint),
-- destroyed_ns when the server stopped holding it (a local KEK file
-- overwritten and removed; a KMS key dropped from the server's keys).
-- A server table: it belongs to no owner.
CREATE TABLE kek_retirements (
    fingerprint  TEXT    NOT NULL,
    job_id       TEXT    NOT NULL,
    due_ns       INTEGER NOT NULL,
    retired_ns   INTEGER NOT NULL DEFAULT 0,
    destroyed_ns INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (fingerprint, job_id)
);
CREATE INDEX kek_retirements_by_job ON kek_retirements (job_id);

-- +goose Down
DROP TABLE kek_retirements;
