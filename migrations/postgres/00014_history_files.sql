-- +goose Up
-- history_files is the history server's catalog (device sync: an
-- installation uploads an encrypted archive, another downloads it by id).
-- The server never holds the archive's key: a row is an opaque object's
-- id, size and deadline. state is 'uploading' until the whole body is
-- stored, then 'ready'; expires_ns is when the expiry sweep deletes the
-- object, then the row. A server table: it belongs to no owner.
CREATE TABLE history_files (
    id          text    NOT NULL PRIMARY KEY,
    object_key  text    NOT NULL,
    state       text    NOT NULL,
    size        bigint  NOT NULL DEFAULT 0,
    created_ns  bigint  NOT NULL,
    expires_ns  bigint  NOT NULL,
    downloads   bigint  NOT NULL DEFAULT 0
);
-- The sweep reads the expired, and eviction the oldest, in order.
CREATE INDEX history_files_by_expiry ON history_files (expires_ns);
CREATE INDEX history_files_by_age ON history_files (created_ns);

-- +goose Down
DROP TABLE history_files;
