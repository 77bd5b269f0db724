package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/internal/sqlstore"
)

// db hands the shared SQL the pool and its transactions.
type db struct {
	pool  *pgxpool.Pool
	space *store.SpaceWatch
}

func (d db) Read() sqlstore.Conn { return conn{d.pool} }

func (d db) Write(ctx context.Context, fn func(sqlstore.Conn) error) error {
	return inTx(ctx, d.pool, d.space, func(tx pgx.Tx) error { return fn(conn{tx}) })
}

func (d db) ReadSnapshot(ctx context.Context, fn func(sqlstore.Conn) error) error {
	tx, err := d.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("postgres: begin snapshot: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	return fn(conn{tx})
}

// conn adapts the pool or a transaction to sqlstore.Conn.
type conn struct {
	q interface {
		Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
		QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
		Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	}
}

// Every error of a statement passes connLost: a connection the driver
// found closed, or a worker Citus lost, is the store unavailable.

func (c conn) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Row {
	return row{c.q.QueryRow(ctx, query, args...)}
}

type row struct{ pgx.Row }

func (r row) Scan(dest ...any) error { return connLost(r.Row.Scan(dest...)) }

func (c conn) Query(ctx context.Context, query string, args []any, each func(sqlstore.Rows) error) error {
	rows, err := c.q.Query(ctx, query, args...)
	if err != nil {
		return connLost(err)
	}
	defer rows.Close()
	if err := each(newBinaryRows(rows)); err != nil {
		return connLost(err)
	}
	return connLost(rows.Err())
}

func (c conn) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := c.q.Exec(ctx, query, args...)
	return tag.RowsAffected(), connLost(err)
}
