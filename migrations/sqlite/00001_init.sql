-- +goose Up
-- The same tables and columns as migrations/postgres, in SQLite's types.
-- WITHOUT ROWID keeps groups and consent clustered on its primary key, which
-- begins with owner, as the Postgres one does;
-- messages keep a rowid because their content makes rows large.

CREATE TABLE groups (
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
    -- NULL: the metadata message is absent (ARCH-024 keeps that distinction).
    creator_inbox_id            text,
    -- NULL, all three: the mutable metadata message is absent.
    attributes                  text,
    admin_list                  text,
    super_admin_list            text,
    paused_for_version          text,
    PRIMARY KEY (owner, id)
) WITHOUT ROWID, STRICT;

CREATE TABLE messages (
    owner                   text NOT NULL,
    id                      blob NOT NULL,
    group_id                blob NOT NULL,
    -- The content bytes exactly as given (ARCH-008).
    decrypted_message_bytes blob NOT NULL,
    sent_at_ns              integer NOT NULL,
    kind                    integer NOT NULL,
    sender_installation_id  blob NOT NULL,
    sender_inbox_id         text NOT NULL,
    delivery_status         integer NOT NULL,
    content_type_save       integer NOT NULL,
    version_major           integer NOT NULL,
    version_minor           integer NOT NULL,
    authority_id            text NOT NULL,
    reference_id            blob,
    sequence_id             integer,
    originator_id           integer,
    content_type            text NOT NULL,
    expires_at_ns           integer,
    -- NULL or false: expiry unknown; true: known, expires_at_ns NULL for
    -- none (ARCH-019).
    expiry_known            integer,
    PRIMARY KEY (owner, id),
    FOREIGN KEY (owner, group_id) REFERENCES groups (owner, id)
) STRICT;

-- Send order within a group: listing, export order and the time window.
CREATE INDEX messages_group_sent ON messages (owner, group_id, sent_at_ns, id);

CREATE TABLE consent (
    owner           text NOT NULL,
    entity_type     integer NOT NULL,
    entity          text NOT NULL,
    state           integer NOT NULL,
    consented_at_ns integer NOT NULL,
    PRIMARY KEY (owner, entity_type, entity)
) WITHOUT ROWID, STRICT;

-- +goose Down
DROP TABLE consent;
DROP TABLE messages;
DROP TABLE groups;
