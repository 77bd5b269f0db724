package migrations

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/pressly/goose/v3/lock"
)

// Citus (the Postgres extension that distributes tables across nodes) is
// a supported engine: when the database has the extension, Up distributes
// what the migrations created, after them and under the same lock.
//
// OwnerTables are the tables an owner's records live in. Each is keyed by
// owner first and every statement on it names the owner (the store's
// router-plan test holds this on a real cluster), so on Citus each is
// distributed by owner, colocated with groups: an owner's groups,
// messages, consent, backups, ticks and change sequence sit on one node,
// every statement routes to that node, and a transaction over them (an
// append's change-sequence bump with its rows) stays on it.
var OwnerTables = []string{"groups", "messages", "consent", "backups", "schedule_ticks", "owner_changes", "owner_keys", "holds", "tombstones"}

// ServerTables are the server's own tables, left as plain tables on the
// coordinator. They are small and fleet-wide (jobs and their leases, the
// write probe, goose's versions), keyed by job or probe rather than
// owner. A reference table would copy them to every node: each job
// transition would then commit on every node (two-phase), and no job
// could change while any worker is down, though the owners on the other
// workers are served. On the coordinator they take the coordinator's
// availability, which the cluster has anyway (it routes every statement).
var ServerTables = []string{"jobs", "store_probe", "goose_db_version", "history_files", "kek_retirements", "erased_owners"}

// citusLockID is goose's migration lock: distributing waits for, and
// holds off, any other server's migration.
const citusLockID = lock.DefaultLockID

// HasCitus reports whether db's database has the citus extension.
func HasCitus(ctx context.Context, db *sql.DB) (bool, error) {
	var has bool
	err := db.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')").Scan(&has)
	if err != nil {
		return false, fmt.Errorf("migrate: is citus installed: %w", err)
	}
	return has, nil
}

// Undistributed returns the owner tables that are not distributed.
func Undistributed(ctx context.Context, db *sql.DB) ([]string, error) {
	var left []string
	for _, table := range OwnerTables {
		var distributed bool
		err := db.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = to_regclass($1))", table).Scan(&distributed)
		if err != nil {
			return nil, fmt.Errorf("migrate: citus: is %s distributed: %w", table, err)
		}
		if !distributed {
			left = append(left, table)
		}
	}
	return left, nil
}

// Distribute distributes each owner table that is not yet distributed,
// groups first (the others colocate with it), and returns those it
// distributed. Idempotent: a table already distributed is left as it is,
// so it runs after every migration, and a table a later migration adds to
// OwnerTables is distributed the first time a server migrates.
func Distribute(ctx context.Context, db *sql.DB) ([]string, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: citus: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", citusLockID); err != nil {
		return nil, fmt.Errorf("migrate: citus: take the migration lock: %w", err)
	}
	defer func() {
		// A fresh context: the lock is released even when ctx ended.
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", citusLockID)
	}()
	var workers int
	if err := conn.QueryRowContext(ctx, "SELECT count(*) FROM pg_dist_node WHERE noderole = 'primary' AND groupid <> 0").Scan(&workers); err != nil {
		return nil, fmt.Errorf("migrate: citus: count worker nodes: %w", err)
	}
	var done []string
	for _, table := range OwnerTables {
		var distributed bool
		err := conn.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = to_regclass($1))", table).Scan(&distributed)
		if err != nil {
			return done, fmt.Errorf("migrate: citus: is %s distributed: %w", table, err)
		}
		if distributed {
			continue
		}
		if workers == 0 {
			return done, errors.New("migrate: citus: the database has the citus extension but no worker node: add one (citus_add_node) before the server distributes its tables")
		}
		q := "SELECT create_distributed_table($1, 'owner', colocate_with => 'groups')"
		if table == OwnerTables[0] {
			q = "SELECT create_distributed_table($1, 'owner')"
		}
		if _, err := conn.ExecContext(ctx, q, table); err != nil {
			return done, fmt.Errorf("migrate: citus: distribute %s by owner: %w", table, err)
		}
		done = append(done, table)
	}
	return done, nil
}
