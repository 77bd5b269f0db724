-- +goose NO TRANSACTION
-- Groups become a rowid table, as messages are. In a WITHOUT ROWID table
-- the whole row is the b-tree key, and a search that passes a row whose
-- payload overflows reads all of it: one large group row made every
-- group lookup (each message insert's foreign key check among them) of its
-- neighbours read it again. In a rowid table the primary key is a separate
-- index of small entries, and the row is read only when it is wanted.
-- Foreign keys are off while the table is swapped (messages refer to it,
-- and dropping the old table would otherwise delete through them); every
-- row is copied, so no reference is left dangling.

-- +goose Up
PRAGMA foreign_keys = OFF;

-- +goose StatementBegin
BEGIN IMMEDIATE;
-- +goose StatementEnd

CREATE TABLE groups_rowid (
    owner                       text NOT NULL,
    id                          blob NOT NULL,
    created_at_ns               integer NOT NULL,
    membership_state            integer NOT NULL,
    installations_last_checked  integer NOT NULL,
    added_by_inbox_id           text NOT NULL,
    welcome_id                  integer,
    rotated_at_ns               integer NOT NULL,
    conversation_type           integer NOT NULL,
    dm_id                       text,
    last_message_ns             integer,
    message_disappear_from_ns   integer,
    message_disappear_in_ns     integer,
    creator_inbox_id            text,
    attributes                  text,
    admin_list                  text,
    super_admin_list            text,
    paused_for_version          text,
    PRIMARY KEY (owner, id)
) STRICT;

INSERT INTO groups_rowid SELECT * FROM groups;
DROP TABLE groups;
ALTER TABLE groups_rowid RENAME TO groups;

-- +goose StatementBegin
COMMIT;
-- +goose StatementEnd

PRAGMA foreign_keys = ON;

-- +goose Down
PRAGMA foreign_keys = OFF;

-- +goose StatementBegin
BEGIN IMMEDIATE;
-- +goose StatementEnd

CREATE TABLE groups_norowid (
    owner                       text NOT NULL,
    id                          blob NOT NULL,
    created_at_ns               integer NOT NULL,
    membership_state            integer NOT NULL,
    installations_last_checked  integer NOT NULL,
    added_by_inbox_id           text NOT NULL,
    welcome_id                  integer,
    rotated_at_ns               integer NOT NULL,
    conversation_type           integer NOT NULL,
    dm_id                       text,
    last_message_ns             integer,
    message_disappear_from_ns   integer,
    message_disappear_in_ns     integer,
    creator_inbox_id            text,
    attributes                  text,
    admin_list                  text,
    super_admin_list            text,
    paused_for_version          text,
    PRIMARY KEY (owner, id)
) WITHOUT ROWID, STRICT;
INSERT INTO groups_norowid SELECT * FROM groups;
DROP TABLE groups;
ALTER TABLE groups_norowid RENAME TO groups;

-- +goose StatementBegin
COMMIT;
-- +goose StatementEnd

PRAGMA foreign_keys = ON;
