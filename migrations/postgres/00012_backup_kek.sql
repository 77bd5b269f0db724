-- +goose Up
-- Which key-encryption key wrapped each backup's data key: a fingerprint
-- (keyring.KEK.Fingerprint), never the key. A server whose KEK does not
-- match the catalog refuses to run jobs rather than read old backups as
-- damaged and wrap new ones under a second KEK. '' for rows written
-- before this migration: the server checks those by unwrapping one.
ALTER TABLE backups ADD COLUMN kek_fingerprint text NOT NULL DEFAULT '';
-- The start-up check reads the distinct fingerprints.
CREATE INDEX backups_by_kek ON backups (kek_fingerprint);

-- +goose Down
DROP INDEX backups_by_kek;
ALTER TABLE backups DROP COLUMN kek_fingerprint;
