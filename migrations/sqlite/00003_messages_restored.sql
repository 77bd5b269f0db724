-- +goose Up
-- restored marks a message that came in by archive import (ARCH-009: with
-- exclude_disappearing_messages, an export leaves out restored messages
-- whose expiry is unknown, and keeps live ones).
ALTER TABLE messages ADD COLUMN restored integer NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE messages DROP COLUMN restored;
