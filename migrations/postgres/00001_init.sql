-- +goose Up
-- Every table's primary key begins with owner, so the schema can be
-- distributed by owner (Citus: create_distributed_table('…', 'owner'))
-- without change, and no query ever touches two owners.

CREATE TABLE groups (
    owner                       text     NOT NULL,
    id                          bytea    NOT NULL,
    created_at_ns               bigint   NOT NULL,
    membership_state            smallint NOT NULL,
    installations_last_checked  bigint   NOT NULL,
    added_by_inbox_id           text     NOT NULL,
    welcome_id                  bigint,
    rotated_at_ns               bigint   NOT NULL,
    conversation_type           smallint NOT NULL,
    dm_id                       text,
    last_message_ns             bigint,
    message_disappear_from_ns   bigint,
    message_disappear_in_ns     bigint,
    -- NULL: the metadata message is absent (ARCH-024 keeps that distinction).
    creator_inbox_id            text,
    -- NULL, all three: the mutable metadata message is absent.
    attributes                  jsonb,
    admin_list                  jsonb,
    super_admin_list            jsonb,
    paused_for_version          text,
    PRIMARY KEY (owner, id)
);

CREATE TABLE messages (
    owner                   text     NOT NULL,
    id                      bytea    NOT NULL,
    group_id                bytea    NOT NULL,
    -- The content bytes exactly as given (ARCH-008).
    decrypted_message_bytes bytea    NOT NULL,
    sent_at_ns              bigint   NOT NULL,
    kind                    smallint NOT NULL,
    sender_installation_id  bytea    NOT NULL,
    sender_inbox_id         text     NOT NULL,
    delivery_status         smallint NOT NULL,
    content_type_save       smallint NOT NULL,
    version_major           integer  NOT NULL,
    version_minor           integer  NOT NULL,
    authority_id            text     NOT NULL,
    reference_id            bytea,
    sequence_id             bigint,
    originator_id           bigint,
    content_type            text     NOT NULL,
    expires_at_ns           bigint,
    -- NULL or false: expiry unknown; true: known, expires_at_ns NULL for
    -- none (ARCH-019).
    expiry_known            boolean,
    PRIMARY KEY (owner, id),
    FOREIGN KEY (owner, group_id) REFERENCES groups (owner, id)
);

-- Send order within a group: listing, export order and the time window.
CREATE INDEX messages_group_sent ON messages (owner, group_id, sent_at_ns, id);

CREATE TABLE consent (
    owner           text     NOT NULL,
    entity_type     smallint NOT NULL,
    entity          text     COLLATE "C" NOT NULL,
    state           smallint NOT NULL,
    consented_at_ns bigint   NOT NULL,
    PRIMARY KEY (owner, entity_type, entity)
);

-- +goose Down
DROP TABLE consent;
DROP TABLE messages;
DROP TABLE groups;
