-- +goose Up
-- erased_owners remembers each owner name an erasure was started for, so
-- that an erased owner stays erased: schedules that still list the name
-- skip it until an operator re-enables it (reenabled_ns, who and why),
-- rather than backing up whatever a device still writes under it. An
-- erasure's own record, like its job row: kept by the erasure that writes
-- it (store.ErasureRecordTables). A server table on Citus.
CREATE TABLE erased_owners (
    owner         text   NOT NULL PRIMARY KEY,
    erase_job     text   NOT NULL,
    erased_ns     bigint NOT NULL,
    reenabled_ns  bigint NOT NULL DEFAULT 0,
    reenabled_by  text   NOT NULL DEFAULT '',
    reason        text   NOT NULL DEFAULT ''
);

-- +goose Down
DROP TABLE erased_owners;
