-- +goose Up
-- Each legal hold is its own record (hold_id): several may stand on one
-- target (the owner, or one of its backups), each set, changed and
-- released by itself, so one matter's release or a second holder's
-- shorter end never lifts another's hold (issue 46, finding 9). A target
-- had one hold before: it gets a random id. SQLite cannot
-- change a primary key in place: the table is made again.
CREATE TABLE holds_new (
    owner      TEXT    NOT NULL,
    hold_id    TEXT    NOT NULL,
    backup_id  TEXT    NOT NULL DEFAULT '',
    reason     TEXT    NOT NULL,
    principal  TEXT    NOT NULL,
    created_ns INTEGER NOT NULL,
    until_ns   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (owner, hold_id)
);
INSERT INTO holds_new (owner, hold_id, backup_id, reason, principal, created_ns, until_ns)
    SELECT owner, lower(hex(randomblob(16))), backup_id, reason, principal, created_ns, until_ns FROM holds;
DROP TABLE holds;
ALTER TABLE holds_new RENAME TO holds;
CREATE INDEX holds_by_target ON holds (owner, backup_id);

-- +goose Down
CREATE TABLE holds_old (
    owner      TEXT   NOT NULL,
    backup_id  TEXT   NOT NULL DEFAULT '',
    reason     TEXT   NOT NULL,
    principal  TEXT   NOT NULL,
    created_ns INTEGER NOT NULL,
    until_ns   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (owner, backup_id)
);
INSERT OR IGNORE INTO holds_old (owner, backup_id, reason, principal, created_ns, until_ns)
    SELECT owner, backup_id, reason, principal, created_ns, until_ns FROM holds ORDER BY hold_id;
DROP TABLE holds;
ALTER TABLE holds_old RENAME TO holds;
