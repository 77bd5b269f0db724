-- +goose Up
-- Each legal hold is its own record (hold_id): several may stand on one
-- target (the owner, or one of its backups), each set, changed and
-- released by itself, so one matter's release or a second holder's
-- shorter end never lifts another's hold (issue 46, finding 9). A target
-- had one hold before: its id is made from the target.
ALTER TABLE holds ADD COLUMN hold_id text NOT NULL DEFAULT '';
UPDATE holds SET hold_id = md5(owner || '/' || backup_id) WHERE hold_id = '';
ALTER TABLE holds DROP CONSTRAINT holds_pkey;
ALTER TABLE holds ADD PRIMARY KEY (owner, hold_id);
CREATE INDEX holds_by_target ON holds (owner, backup_id);

-- +goose Down
DROP INDEX holds_by_target;
ALTER TABLE holds DROP CONSTRAINT holds_pkey;
DELETE FROM holds a USING holds b WHERE a.owner = b.owner AND a.backup_id = b.backup_id AND a.hold_id > b.hold_id;
ALTER TABLE holds ADD PRIMARY KEY (owner, backup_id);
ALTER TABLE holds DROP COLUMN hold_id;
