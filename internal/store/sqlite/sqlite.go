// Package sqlite is the embedded store engine: pure-Go SQLite
// (modernc.org/sqlite, no cgo) in one file under a data directory. It is
// the default, so the server runs on a fresh machine with nothing to
// configure, the way Temporal's dev server runs on SQLite.
//
// SQLite takes one writer at a time, so writes go through a pool of one
// connection whose transactions begin IMMEDIATE (taking the write lock at
// BEGIN rather than failing at the first write), and reads through a
// separate pool that WAL mode lets run beside the writer.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/internal/sqlstore"
	"github.com/contentbackup/contentbackup/migrations"
)

// FileName is the database file inside the data directory.
const FileName = "contentbackup.db"

// Store is the SQLite engine.
type Store struct {
	sqlstore.SQLStore
	write *sql.DB
	read  *sql.DB
	path  string
	space *store.SpaceWatch
}

var _ store.Store = (*Store)(nil)

// Options configures Open.
type Options struct {
	// Migrate applies pending migrations at open; without it a database
	// whose schema is behind fails to open.
	Migrate bool
	// MaxPages, when set, caps the database file at that many pages
	// (PRAGMA max_page_count) on the writer: past it writes fail
	// SQLITE_FULL, as on a full disk. For tests only, which use it to fill
	// the store (TestPageCapIsTestOnly holds that no binary sets it).
	MaxPages int
}

// Open opens (creating when missing) the database in dir.
func Open(ctx context.Context, dir string, opts Options) (*Store, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("sqlite: data directory: %w", err)
	}
	path := filepath.Join(dir, FileName)
	// secure_delete: deleted content is overwritten with zeros rather
	// than left in free pages, so an erased owner's rows are not in the
	// live file once the WAL is checkpointed (ScrubFreed).
	pragmas := "_pragma=foreign_keys(1)&_pragma=busy_timeout(30000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=cache_size(-65536)&_pragma=wal_autocheckpoint(4096)&_pragma=secure_delete(1)"
	write, err := sql.Open("sqlite", "file:"+path+"?"+pragmas+"&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	write.SetMaxOpenConns(1)

	read, err := sql.Open("sqlite", "file:"+path+"?"+pragmas+"&_pragma=query_only(1)")
	if err != nil {
		write.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	read.SetMaxOpenConns(max(4, runtime.GOMAXPROCS(0)))
	s := &Store{write: write, read: read, path: path, space: store.NewSpaceWatch("sqlite")}
	s.SQLStore = sqlstore.NewSQLStore(db{s}, dialect)
	if err := s.prepare(ctx, opts); err != nil {
		s.Close()
		return nil, err
	}
	if opts.MaxPages > 0 {
		// After the migrations, which need the room the cap refuses. The
		// pragma holds for the writer's one connection, which is kept.
		if err := s.SetMaxPages(ctx, opts.MaxPages); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

func (s *Store) prepare(ctx context.Context, opts Options) error {
	if opts.Migrate {
		if _, err := migrations.Up(ctx, s.write, migrations.SQLite); err != nil {
			return fmt.Errorf("sqlite: %w", err)
		}
		return nil
	}
	current, latest, err := migrations.Status(ctx, s.write, migrations.SQLite)
	if err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	if current < latest {
		return fmt.Errorf("sqlite: %s is at schema version %d, the binary needs %d: run the migrate command or start with --migrate", s.path, current, latest)
	}
	return nil
}

// DB exposes the write pool, for the migrate command.
func (s *Store) DB() *sql.DB { return s.write }

// Ping checks that the database file answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.read.PingContext(ctx); err != nil {
		return fmt.Errorf("sqlite: ping: %w", err)
	}
	return nil
}

// ProbeWrite writes store_probe for health (store.Store).
func (s *Store) ProbeWrite(ctx context.Context) error { return s.Probe(ctx, s.space) }

// SetMaxPages caps the database file at n pages (PRAGMA max_page_count)
// on the writer, as Options.MaxPages does at open: for tests, to stand in
// for a full disk and then free it (TestPageCapIsTestOnly).
func (s *Store) SetMaxPages(ctx context.Context, n int) error {
	if _, err := s.write.ExecContext(ctx, fmt.Sprintf("PRAGMA max_page_count = %d", n)); err != nil {
		return fmt.Errorf("sqlite: max_page_count: %w", err)
	}
	return nil
}

// Close closes both pools.
func (s *Store) Close() error {
	return errors.Join(s.read.Close(), s.write.Close())
}

// inTx runs fn in a write transaction, committing when it returns nil.
func (s *Store) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: begin: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return s.space.Note(err)
	}
	if err := tx.Commit(); err != nil {
		return s.space.Note(fmt.Errorf("sqlite: commit: %w", err))
	}
	return nil
}

// dialect is SQLite's SQL for the shared statements. The write
// transaction holds the database, so no statement locks rows.
var dialect = sqlstore.Dialect{
	Name:        "sqlite",
	Placeholder: func(int) string { return "?" },
	NoRows:      sql.ErrNoRows,
}

// db hands the shared SQL the read pool and the writer's transactions.
type db struct{ s *Store }

func (d db) Read() sqlstore.Conn { return conn{d.s.read} }

func (d db) Write(ctx context.Context, fn func(sqlstore.Conn) error) error {
	return d.s.inTx(ctx, func(tx *sql.Tx) error { return fn(conn{tx}) })
}

// ReadSnapshot: in WAL mode a read transaction sees the database as of its
// first read, whatever commits after: one consistent view for the export.
func (d db) ReadSnapshot(ctx context.Context, fn func(sqlstore.Conn) error) error {
	tx, err := d.s.read.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("sqlite: begin snapshot: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	return fn(conn{tx})
}

// conn adapts a pool or a transaction to sqlstore.Conn.
type conn struct {
	q interface {
		QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
		QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	}
}

func (c conn) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Row {
	return c.q.QueryRowContext(ctx, query, args...)
}

func (c conn) Query(ctx context.Context, query string, args []any, each func(sqlstore.Rows) error) error {
	rows, err := c.q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if err := each(rows); err != nil {
		return err
	}
	return errors.Join(rows.Err(), rows.Close())
}

func (c conn) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := c.q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// appendChunk is how many rows one INSERT of AppendMessages carries, well
// under SQLite's limit of 32766 parameters.
const appendChunk = 64

// messageInsert inserts n rows.
func messageInsert(n int) string {
	row := "(" + placeholders(store.MessageInsertColumnCount+1) + ")"
	return `INSERT INTO messages (owner, ` + store.MessageInsertColumns + `) VALUES ` + strings.TrimSuffix(strings.Repeat(row+", ", n), ", ")
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

func (s *Store) AppendMessages(ctx context.Context, owner string, msgs []*mb.GroupMessageSave, opts store.AppendOptions) ([]store.Outcome, error) {
	store.Derive(msgs)
	out := make([]store.Outcome, len(msgs))
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		seq, err := nextChangeIn(ctx, tx, owner)
		if err != nil {
			return err
		}
		if err := checkGroups(ctx, tx, owner, msgs, opts); err != nil {
			return err
		}
		// Inside the write transaction nothing else writes, so the ids
		// already stored can be found first and the rest inserted plainly,
		// many rows per statement: one statement per row spends more in
		// database/sql and the VM's setup than in the insert itself.
		known, err := storedIDs(ctx, tx, owner, msgs)
		if err != nil {
			return err
		}
		fresh := make([]*mb.GroupMessageSave, 0, len(msgs))
		for i, m := range msgs {
			out[i] = store.Unchanged
			if !known[string(m.GetId())] {
				known[string(m.GetId())] = true // a repeat later in the batch is unchanged
				out[i] = store.Inserted
				fresh = append(fresh, m)
			}
		}
		args := make([]any, 0, appendChunk*(store.MessageInsertColumnCount+1))
		var full *sql.Stmt
		for start := 0; start < len(fresh); start += appendChunk {
			chunk := fresh[start:min(start+appendChunk, len(fresh))]
			args = args[:0]
			for _, m := range chunk {
				args = append(append(args, owner), store.MessageInsertArgs(m, opts.AllowRestored, seq)...)
			}
			if len(chunk) == appendChunk {
				if full == nil {
					if full, err = tx.PrepareContext(ctx, messageInsert(appendChunk)); err != nil {
						return fmt.Errorf("sqlite: prepare append: %w", err)
					}
					defer full.Close()
				}
				_, err = full.ExecContext(ctx, args...)
			} else {
				_, err = tx.ExecContext(ctx, messageInsert(len(chunk)), args...)
			}
			if err != nil {
				return fmt.Errorf("sqlite: append messages: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// nextChangeIn raises owner's change sequence first thing in tx (see
// sqlstore.NextChange for why first).
func nextChangeIn(ctx context.Context, tx *sql.Tx, owner string) (int64, error) {
	var seq int64
	if err := tx.QueryRowContext(ctx, store.NextChangeSQL, owner).Scan(&seq); err != nil {
		return 0, fmt.Errorf("sqlite: next change: %w", err)
	}
	return seq, nil
}

// storedIDs returns which of the messages' ids the owner already has.
func storedIDs(ctx context.Context, tx *sql.Tx, owner string, msgs []*mb.GroupMessageSave) (map[string]bool, error) {
	known := make(map[string]bool)
	const chunk = 500
	args := make([]any, 0, chunk+1)
	for start := 0; start < len(msgs); start += chunk {
		part := msgs[start:min(start+chunk, len(msgs))]
		args = append(args[:0], owner)
		for _, m := range part {
			args = append(args, m.GetId())
		}
		rows, err := tx.QueryContext(ctx, `SELECT id FROM messages WHERE owner = ? AND id IN (`+placeholders(len(part))+`)`, args...)
		if err != nil {
			return nil, fmt.Errorf("sqlite: read message ids: %w", err)
		}
		for rows.Next() {
			var id []byte
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, fmt.Errorf("sqlite: read message ids: %w", err)
			}
			known[string(id)] = true
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return nil, fmt.Errorf("sqlite: read message ids: %w", err)
		}
	}
	return known, nil
}

// checkGroups fails unless every group the messages name exists and, for
// the services, is active.
func checkGroups(ctx context.Context, tx *sql.Tx, owner string, msgs []*mb.GroupMessageSave, opts store.AppendOptions) error {
	seen := make(map[string]bool)
	for _, m := range msgs {
		if seen[string(m.GetGroupId())] {
			continue
		}
		seen[string(m.GetGroupId())] = true
		var state int32
		err := tx.QueryRowContext(ctx, `SELECT membership_state FROM groups WHERE owner = ? AND id = ?`, owner, m.GetGroupId()).Scan(&state)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("group %x of message %x: %w", m.GetGroupId(), m.GetId(), store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("sqlite: read group %x: %w", m.GetGroupId(), err)
		}
		if !opts.AllowRestored && gb.GroupMembershipStateSave(state) == gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_RESTORED {
			return fmt.Errorf("group %x of message %x: %w", m.GetGroupId(), m.GetId(), store.ErrGroupInactive)
		}
	}
	return nil
}

func (s *Store) MergeConsent(ctx context.Context, owner string, records []*cs.ConsentSave) ([]store.Outcome, error) {
	out := make([]store.Outcome, len(records))
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		seq, err := nextChangeIn(ctx, tx, owner)
		if err != nil {
			return err
		}
		for i, r := range records {
			var at int64
			err := tx.QueryRowContext(ctx, `SELECT consented_at_ns FROM consent WHERE owner = ? AND entity_type = ? AND entity = ?`,
				owner, int32(r.GetEntityType()), r.GetEntity()).Scan(&at)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				out[i] = store.Inserted
			case err != nil:
				return fmt.Errorf("sqlite: read consent %s: %w", r.GetEntity(), err)
			case r.GetConsentedAtNs() > at:
				out[i] = store.Updated
			default:
				out[i] = store.Unchanged
				continue
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO consent (owner, entity_type, entity, state, consented_at_ns, change_seq) VALUES (?, ?, ?, ?, ?, ?)
				ON CONFLICT (owner, entity_type, entity) DO UPDATE SET state = excluded.state, consented_at_ns = excluded.consented_at_ns, change_seq = excluded.change_seq`,
				owner, int32(r.GetEntityType()), r.GetEntity(), int32(r.GetState()), r.GetConsentedAtNs(), seq); err != nil {
				return fmt.Errorf("sqlite: write consent %s: %w", r.GetEntity(), err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ScrubFreed checkpoints the WAL into the database file and truncates it:
// with secure_delete on, the pages deleted rows held are zeros in the
// file once checkpointed, and the WAL's older copies of them are gone. A
// reader holding an older snapshot keeps the checkpoint from completing:
// it is tried again until ctx ends.
func (s *Store) ScrubFreed(ctx context.Context) error {
	for {
		var busy, logPages, checkpointed int
		err := s.write.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &logPages, &checkpointed)
		if err != nil {
			return fmt.Errorf("sqlite: checkpoint the WAL: %w", err)
		}
		if busy == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sqlite: checkpoint the WAL: readers held it until %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
