// Package postgres is the production store engine: PostgreSQL through
// pgx's connection pool. Bulk appends COPY the rows the owner does not
// have yet (falling back to one INSERT over unnest()ed arrays when a
// concurrent append races it); reads page by keyset, never holding a table
// in memory; export reads inside one REPEATABLE READ, READ ONLY
// transaction. The SQL it shares with the embedded engine is
// sqlstore.SQLStore's.
package postgres

//lint:file-ignore SA1019 content_type_save is retired but still stored and returned as given (ARCH-004, ARCH-008).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/internal/sqlstore"
	"github.com/contentbackup/contentbackup/migrations"
)

// Store is the Postgres engine.
type Store struct {
	sqlstore.SQLStore
	pool  *pgxpool.Pool
	space *store.SpaceWatch
	// citus: the database has Citus, whose COPY always commits in two
	// phases (see appendCitus).
	citus bool
	// Distributed names the tables this Open distributed on Citus (none
	// on plain Postgres, or when they were already).
	Distributed []string
}

var _ store.Store = (*Store)(nil)

// Options configures Open.
type Options struct {
	// Migrate applies pending migrations at open; without it a database
	// whose schema is behind fails to open.
	Migrate bool
	// Tracer, when set, traces every query (the OpenTelemetry pgx tracer
	// when tracing is on).
	Tracer pgx.QueryTracer
	// OnNotice, when set, is called with each notice the server sends
	// (the Citus router-plan test reads Citus's multi-shard notices).
	OnNotice func(*pgconn.PgConn, *pgconn.Notice)
	// MaxConns is the pool's size when url sets no pool_max_conns (0:
	// pgx's, the greater of 4 and the CPUs). The server fits it to what
	// holds a connection for long: an export streaming its snapshot, a
	// job (cmd/server's poolSize).
	MaxConns int32
}

// Open connects to the database at url (a postgres:// URL or key=value
// DSN; pool settings such as pool_max_conns go in it too).
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	cfg, err := poolConfig(url, opts)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	space := store.NewSpaceWatch("postgres")
	s := &Store{SQLStore: sqlstore.NewSQLStore(db{pool, space}, dialect), pool: pool, space: space}
	if err := s.prepare(ctx, opts); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

func (s *Store) prepare(ctx context.Context, opts Options) error {
	db := stdlib.OpenDBFromPool(s.pool)
	defer db.Close()
	citus, err := migrations.HasCitus(ctx, db)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	s.citus = citus
	if opts.Migrate {
		if _, err := migrations.Up(ctx, db, migrations.Postgres); err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
		if citus {
			if s.Distributed, err = migrations.Distribute(ctx, db); err != nil {
				return fmt.Errorf("postgres: %w", err)
			}
		}
		return nil
	}
	current, latest, err := migrations.Status(ctx, db, migrations.Postgres)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	if current < latest {
		return fmt.Errorf("postgres: the database is at schema version %d, the binary needs %d: run the migrate command or start with --migrate", current, latest)
	}
	if citus {
		left, err := migrations.Undistributed(ctx, db)
		if err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
		if len(left) > 0 {
			return fmt.Errorf("postgres: the database has Citus but %s not distributed by owner: run the migrate command or start with --migrate", strings.Join(left, ", "))
		}
	}
	return nil
}

// Pool exposes the connection pool, for benchmarks and the migrate command.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: ping: %w", err)
	}
	return nil
}

// ProbeWrite writes store_probe for health (store.Store).
func (s *Store) ProbeWrite(ctx context.Context) error { return s.Probe(ctx, s.space) }

// Close closes the pool.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// inTx runs fn in a read-write transaction, committing when it returns nil.
// fn's error comes back as it is: it is either the store's own (not found,
// a rule of the caller's) or already says what failed.
func inTx(ctx context.Context, pool *pgxpool.Pool, space *store.SpaceWatch, fn func(pgx.Tx) error) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return space.Note(connLost(fmt.Errorf("postgres: begin: %w", err)))
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return space.Note(connLost(err))
	}
	if err := tx.Commit(ctx); err != nil {
		// A commit cut off with its connection (the primary died) may or
		// may not have happened: unavailable, and safe to retry, since
		// every write is idempotent by its records' ids.
		return space.Note(connLost(fmt.Errorf("postgres: commit: %w", err)))
	}
	return nil
}

// connLost marks an error of a connection the driver found closed (the
// server went away under it) as the store being unavailable, which the
// driver's own error does not always say (pgconn.ErrConnClosed without
// SafeToRetry).
func connLost(err error) error {
	if (errors.Is(err, pgconn.ErrConnClosed) || citusLostWorker(err)) && !errors.Is(err, store.ErrUnavailable) {
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return err
}

// citusLostWorker reports a Citus coordinator relaying a worker that went
// away mid-statement. Citus relays a COPY's failure on a worker as an
// internal error (XX000) with the worker's message, whatever its code,
// so a worker shut down under a COPY reads as a bug, not an outage
// (make citus's worker test saw one INTERNAL among 183 UNAVAILABLE).
func citusLostWorker(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "XX000" {
		return false
	}
	for _, lost := range []string{"terminating connection due to administrator command", "connection to the remote node",
		"server closed the connection unexpectedly", "the database system is shutting down", "the database system is starting up",
		// A one-phase commit whose worker went away while committing:
		// it may or may not have happened, as with a lost primary.
		"could not commit transaction for shard"} {
		if strings.Contains(pgErr.Message, lost) {
			return true
		}
	}
	return false
}

const stateRestored = int32(gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_RESTORED)

// dialect is Postgres' SQL for the shared statements.
var dialect = sqlstore.Dialect{
	Name:        "postgres",
	Placeholder: func(i int) string { return "$" + strconv.Itoa(i) },
	NoRows:      pgx.ErrNoRows,
	ForUpdate:   " FOR UPDATE",
	SkipLocked:  " SKIP LOCKED",
	ForShare:    " FOR SHARE",
	LockKey:     "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
}

// ScrubFreed vacuums the tables that hold owners' rows, so the space
// deleted rows held is marked free and reused by later writes. VACUUM
// does not overwrite it: until then the bytes stay in the data files (and
// in WAL segments and base backups kept elsewhere), which is why an
// erasure's guarantee rests on destroying the owner's key (docs/erasure.md).
func (s *Store) ScrubFreed(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, "VACUUM "+strings.Join(store.OwnerRowTables, ", ")); err != nil {
		return fmt.Errorf("postgres: vacuum: %w", err)
	}
	return nil
}
