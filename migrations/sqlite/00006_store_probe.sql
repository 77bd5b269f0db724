-- +goose Up
-- store_probe holds one row that health rewrites: a store that answers
-- reads but refuses writes (out of space, a read-only standby) reports
-- NOT_SERVING until the write succeeds again. Row 1 is rewritten in the
-- normal state; row 2, padded, is inserted and deleted in one transaction
-- while the store is out of space, to prove room was freed.
CREATE TABLE store_probe (
    id    integer NOT NULL PRIMARY KEY,
    at_ns bigint  NOT NULL,
    pad   blob   NOT NULL
);

-- +goose Down
DROP TABLE store_probe;
