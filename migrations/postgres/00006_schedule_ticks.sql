-- +goose Up
-- schedule_ticks: one row per schedule, owner and tick that a replica
-- claimed before exporting, so that of N replicas firing the same tick
-- (their clocks skewed or not) exactly one runs it. The owner leads the
-- key, as on every owner's table. Rows older than a day are deleted as
-- new ticks are claimed.
CREATE TABLE schedule_ticks (
    owner       text   NOT NULL,
    schedule    text   NOT NULL,
    tick_ns     bigint NOT NULL,
    claimed_by  text   NOT NULL,
    claimed_ns  bigint NOT NULL,
    PRIMARY KEY (owner, schedule, tick_ns)
);

-- +goose Down
DROP TABLE schedule_ticks;
