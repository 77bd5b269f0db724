-- +goose Up
-- messages_expiry: the purge of expired messages (META-051) walks the
-- owners holding any, in owner order, and each owner's expired messages.
-- Only messages with a deadline are indexed.
CREATE INDEX messages_expiry ON messages (owner, expires_at_ns) WHERE expires_at_ns IS NOT NULL;

-- +goose Down
DROP INDEX messages_expiry;
