-- +goose Up
-- erased_owners remembers each owner name an erasure was started for, so
-- that an erased owner stays erased: schedules that still list the name
-- skip it until an operator re-enables it (reenabled_ns, who and why),
-- rather than backing up whatever a device still writes under it. An
-- erasure's own record, like its job row: kept by the erasure that writes
-- it (store.ErasureRecordTables). A server table on Citus.
CREATE TABLE erased_owners (
    owner         TEXT    NOT NULL PRIMARY KEY,
    erase_job     TEXT    NOT NULL,
    erased_ns     INTEGER NOT NULL,
    reenabled_ns  INTEGER NOT NULL DEFAULT 0,
    reenabled_by  TEXT    NOT NULL DEFAULT '',
    reason        TEXT    NOT NULL DEFAULT ''
);

-- +goose Down
DROP TABLE erased_owners;
