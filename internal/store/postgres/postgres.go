// Package postgres is the production store engine: PostgreSQL through
// pgx's connection pool. Bulk appends go to the server as one INSERT over
// unnest()ed arrays (binary-encoded, one round trip per batch); reads page
// by keyset, never holding a table in memory; export reads inside one
// REPEATABLE READ, READ ONLY transaction.
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

	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/migrations"
)

// Store is the Postgres engine.
type Store struct {
	pool *pgxpool.Pool
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
}

// Open connects to the database at url (a postgres:// URL or key=value
// DSN; pool settings such as pool_max_conns go in it too).
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: database url: %w", err)
	}
	if opts.Tracer != nil {
		cfg.ConnConfig.Tracer = opts.Tracer
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	s := &Store{pool: pool}
	if err := s.prepare(ctx, opts); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

func (s *Store) prepare(ctx context.Context, opts Options) error {
	db := stdlib.OpenDBFromPool(s.pool)
	defer db.Close()
	if opts.Migrate {
		if _, err := migrations.Up(ctx, db, migrations.Postgres); err != nil {
			return fmt.Errorf("postgres: %w", err)
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

// Close closes the pool.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// inTx runs fn in a read-write transaction, committing when it returns nil.
// fn's error comes back as it is: it is either the store's own (not found,
// a rule of the caller's) or already says what failed.
func (s *Store) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres: begin: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres: commit: %w", err)
	}
	return nil
}

// querier is what reads need: the pool, or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

const (
	groupSelect   = `SELECT ` + store.GroupColumns + ` FROM groups`
	messageSelect = `SELECT ` + store.MessageColumns + ` FROM messages`
	stateRestored = int32(gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_RESTORED)
)

var (
	groupInsert = `INSERT INTO groups (owner, ` + store.GroupColumns + `) VALUES (` + placeholders(store.GroupColumnCount+1) + `)`
	groupUpsert = groupInsert + ` ON CONFLICT (owner, id) DO UPDATE SET ` + store.UpsertSet(store.GroupColumns)
	// messageAppend inserts a batch given as one array per column, in
	// input order, and returns the ids it stored.
	messageAppend = `INSERT INTO messages (owner, ` + store.MessageInsertColumns + `)
		SELECT $1, ` + prefixed("u.", store.MessageColumns) + `, $20 FROM unnest($2::bytea[], $3::bytea[], $4::bytea[], $5::bigint[], $6::smallint[],
			$7::bytea[], $8::text[], $9::smallint[], $10::smallint[], $11::integer[], $12::integer[], $13::text[],
			$14::bytea[], $15::bigint[], $16::bigint[], $17::text[], $18::bigint[], $19::boolean[])
			WITH ORDINALITY AS u(` + store.MessageColumns + `, ord)
		ORDER BY u.ord
		ON CONFLICT (owner, id) DO NOTHING
		RETURNING id`
)

// prefixed qualifies every column of a column list.
func prefixed(prefix, columns string) string {
	cols := strings.Split(columns, ",")
	for i, c := range cols {
		cols[i] = prefix + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}

// copyColumns are the messages table's columns, owner first, for COPY.
var copyColumns = func() []string {
	cols := []string{"owner"}
	for _, c := range strings.Split(store.MessageInsertColumns, ",") {
		cols = append(cols, strings.TrimSpace(c))
	}
	return cols
}()

func placeholders(n int) string {
	p := make([]string, n)
	for i := range p {
		p[i] = fmt.Sprintf("$%d", i+1)
	}
	return strings.Join(p, ", ")
}

func getGroup(ctx context.Context, q querier, owner string, id []byte, lock string) (*gb.GroupSave, error) {
	var row store.GroupRow
	err := q.QueryRow(ctx, groupSelect+` WHERE owner = $1 AND id = $2`+lock, owner, id).Scan(row.Dest()...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("group %x: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: read group %x: %w", id, err)
	}
	return row.Group()
}

func (s *Store) GetGroup(ctx context.Context, owner string, id []byte) (*gb.GroupSave, error) {
	return getGroup(ctx, s.pool, owner, id, "")
}

func (s *Store) PutGroup(ctx context.Context, owner string, g *gb.GroupSave) (created bool, err error) {
	args, err := store.GroupArgs(g)
	if err != nil {
		return false, err
	}
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		old, err := getGroup(ctx, tx, owner, g.GetId(), " FOR UPDATE")
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if err := store.CheckPut(old); err != nil {
			return err
		}
		created = old == nil
		if _, err := tx.Exec(ctx, groupUpsert, append([]any{owner}, args...)...); err != nil {
			return fmt.Errorf("postgres: write group %x: %w", g.GetId(), err)
		}
		return nil
	})
	return created, err
}

func (s *Store) ListGroups(ctx context.Context, owner string, after []byte, limit int) ([]*gb.GroupSave, error) {
	return listGroups(ctx, s.pool, owner, after, limit)
}

func listGroups(ctx context.Context, q querier, owner string, after []byte, limit int) ([]*gb.GroupSave, error) {
	query, args := store.GroupSelect(owner, after, limit, func(i int) string { return "$" + strconv.Itoa(i) })
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list groups: %w", err)
	}
	defer rows.Close()
	out, err := store.CollectGroups(rows)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return out, nil
}

func (s *Store) ActivateGroup(ctx context.Context, owner string, id []byte) (g *gb.GroupSave, activated bool, err error) {
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		if g, err = getGroup(ctx, tx, owner, id, " FOR UPDATE"); err != nil {
			return err
		}
		if activated, err = store.Activate(g); err != nil || !activated {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE groups SET membership_state = $1 WHERE owner = $2 AND id = $3`,
			int32(g.MembershipState), owner, id); err != nil {
			return fmt.Errorf("postgres: activate group %x: %w", id, err)
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	return g, activated, nil
}

func (s *Store) MergeGroups(ctx context.Context, owner string, groups []*gb.GroupSave) ([]store.Outcome, error) {
	out := make([]store.Outcome, len(groups))
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		for i, g := range groups {
			var last *int64
			err := tx.QueryRow(ctx, `SELECT last_message_ns FROM groups WHERE owner = $1 AND id = $2 FOR UPDATE`, owner, g.GetId()).Scan(&last)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				args, err := store.GroupArgs(store.Restored(g))
				if err != nil {
					return fmt.Errorf("group %x: %w", g.GetId(), err)
				}
				// Two imports of the same group at once: the second one's
				// insert finds the first one's row and leaves it.
				tag, err := tx.Exec(ctx, groupInsert+` ON CONFLICT (owner, id) DO NOTHING`, append([]any{owner}, args...)...)
				if err != nil {
					return fmt.Errorf("postgres: insert group %x: %w", g.GetId(), err)
				}
				out[i] = store.Unchanged
				if tag.RowsAffected() == 1 {
					out[i] = store.Inserted
				}
			case err != nil:
				return fmt.Errorf("postgres: read group %x: %w", g.GetId(), err)
			case store.Later(g.LastMessageNs, last):
				if _, err := tx.Exec(ctx, `UPDATE groups SET last_message_ns = $1 WHERE owner = $2 AND id = $3`,
					g.GetLastMessageNs(), owner, g.GetId()); err != nil {
					return fmt.Errorf("postgres: update group %x: %w", g.GetId(), err)
				}
				out[i] = store.Updated
			default:
				out[i] = store.Unchanged
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (s *Store) AppendMessages(ctx context.Context, owner string, msgs []*mb.GroupMessageSave, opts store.AppendOptions) ([]store.Outcome, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	store.Derive(msgs)
	var out []store.Outcome
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if err := checkGroups(ctx, tx, owner, msgs, opts); err != nil {
			return err
		}
		var err error
		out, err = copyNew(ctx, tx, owner, msgs, opts.AllowRestored)
		if errors.Is(err, errConcurrentInsert) {
			out, err = insertNew(ctx, tx, owner, msgs, opts.AllowRestored)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// errConcurrentInsert: an id copyNew found absent was stored meanwhile by
// another transaction.
var errConcurrentInsert = errors.New("a message id was inserted concurrently")

// copyNew is the fast path of an append: find which ids are stored, then
// COPY the rest, the first occurrence of each id in the batch. A
// concurrent insert of one of them makes COPY fail on the primary key; the
// savepoint is rolled back and insertNew, which tolerates it, runs instead.
func copyNew(ctx context.Context, tx pgx.Tx, owner string, msgs []*mb.GroupMessageSave, restored bool) ([]store.Outcome, error) {
	ids := make([][]byte, len(msgs))
	for i, m := range msgs {
		ids[i] = m.GetId()
	}
	rows, err := tx.Query(ctx, `SELECT id FROM messages WHERE owner = $1 AND id = ANY($2)`, owner, ids)
	if err != nil {
		return nil, fmt.Errorf("postgres: read message ids: %w", err)
	}
	known := make(map[string]bool)
	var id []byte
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error { known[string(id)] = true; return nil }); err != nil {
		return nil, fmt.Errorf("postgres: read message ids: %w", err)
	}
	out := make([]store.Outcome, len(msgs))
	fresh := make([]*mb.GroupMessageSave, 0, len(msgs))
	for i, m := range msgs {
		out[i] = store.Unchanged
		if !known[string(m.GetId())] {
			known[string(m.GetId())] = true
			out[i] = store.Inserted
			fresh = append(fresh, m)
		}
	}
	if len(fresh) == 0 {
		return out, nil
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: savepoint: %w", err)
	}
	_, err = sp.CopyFrom(ctx, pgx.Identifier{"messages"}, copyColumns, pgx.CopyFromSlice(len(fresh), func(i int) ([]any, error) {
		return append([]any{owner}, store.MessageInsertArgs(fresh[i], restored)...), nil
	}))
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "23505": // unique_violation
		if rerr := sp.Rollback(ctx); rerr != nil {
			return nil, fmt.Errorf("postgres: rollback to savepoint: %w", rerr)
		}
		return nil, errConcurrentInsert
	case err != nil:
		return nil, fmt.Errorf("postgres: append messages: %w", err)
	}
	if err := sp.Commit(ctx); err != nil {
		return nil, fmt.Errorf("postgres: release savepoint: %w", err)
	}
	return out, nil
}

// insertNew inserts the batch in one statement that leaves stored ids
// alone and returns the ids it stored.
func insertNew(ctx context.Context, tx pgx.Tx, owner string, msgs []*mb.GroupMessageSave, restored bool) ([]store.Outcome, error) {
	rows, err := tx.Query(ctx, messageAppend, append(append([]any{owner}, columnsOf(msgs)...), restored)...)
	if err != nil {
		return nil, fmt.Errorf("postgres: append messages: %w", err)
	}
	inserted := make(map[string]bool, len(msgs))
	var id []byte
	_, err = pgx.ForEachRow(rows, []any{&id}, func() error {
		inserted[string(id)] = true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: append messages: %w", err)
	}
	// The first occurrence of an id in the batch is the one stored.
	out := make([]store.Outcome, len(msgs))
	for i, m := range msgs {
		out[i] = store.Unchanged
		if inserted[string(m.GetId())] {
			out[i] = store.Inserted
			delete(inserted, string(m.GetId()))
		}
	}
	return out, nil
}

// columnsOf turns a batch into one array per column for messageAppend.
func columnsOf(msgs []*mb.GroupMessageSave) []any {
	n := len(msgs)
	var (
		ids, groups, contents, installs, refs = make([][]byte, n), make([][]byte, n), make([][]byte, n), make([][]byte, n), make([][]byte, n)
		sent                                  = make([]int64, n)
		kinds, statuses, ctSaves              = make([]int16, n), make([]int16, n), make([]int16, n)
		majors, minors                        = make([]int32, n), make([]int32, n)
		senders, authorities, contentTypes    = make([]string, n), make([]string, n), make([]string, n)
		seqs, origs, expires                  = make([]*int64, n), make([]*int64, n), make([]*int64, n)
		known                                 = make([]*bool, n)
	)
	for i, m := range msgs {
		ids[i], groups[i], contents[i] = m.GetId(), m.GetGroupId(), nonNil(m.GetDecryptedMessageBytes())
		sent[i], kinds[i] = m.GetSentAtNs(), int16(m.GetKind())
		installs[i], senders[i] = nonNil(m.GetSenderInstallationId()), m.GetSenderInboxId()
		statuses[i], ctSaves[i] = int16(m.GetDeliveryStatus()), int16(m.GetContentTypeSave())
		majors[i], minors[i], authorities[i] = m.GetVersionMajor(), m.GetVersionMinor(), m.GetAuthorityId()
		refs[i], seqs[i], origs[i] = m.ReferenceId, m.SequenceId, m.OriginatorId
		contentTypes[i], expires[i], known[i] = m.GetContentType(), m.ExpiresAtNs, m.ExpiryKnown
	}
	return []any{ids, groups, contents, sent, kinds, installs, senders, statuses, ctSaves,
		majors, minors, authorities, refs, seqs, origs, contentTypes, expires, known}
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// checkGroups fails unless every group the messages name exists and, for
// the services, is active. FOR SHARE holds the groups' state until commit,
// so a concurrent change cannot slip between the check and the insert.
func checkGroups(ctx context.Context, tx pgx.Tx, owner string, msgs []*mb.GroupMessageSave, opts store.AppendOptions) error {
	var ids [][]byte
	first := make(map[string]*mb.GroupMessageSave)
	for _, m := range msgs {
		if _, ok := first[string(m.GetGroupId())]; !ok {
			first[string(m.GetGroupId())] = m
			ids = append(ids, m.GetGroupId())
		}
	}
	rows, err := tx.Query(ctx, `SELECT id, membership_state FROM groups WHERE owner = $1 AND id = ANY($2) FOR SHARE`, owner, ids)
	if err != nil {
		return fmt.Errorf("postgres: read groups: %w", err)
	}
	states := make(map[string]int32, len(ids))
	var id []byte
	var state int32
	if _, err := pgx.ForEachRow(rows, []any{&id, &state}, func() error {
		states[string(id)] = state
		return nil
	}); err != nil {
		return fmt.Errorf("postgres: read groups: %w", err)
	}
	for _, gid := range ids {
		m := first[string(gid)]
		st, ok := states[string(gid)]
		if !ok {
			return fmt.Errorf("group %x of message %x: %w", gid, m.GetId(), store.ErrNotFound)
		}
		if !opts.AllowRestored && st == stateRestored {
			return fmt.Errorf("group %x of message %x: %w", gid, m.GetId(), store.ErrGroupInactive)
		}
	}
	return nil
}

func (s *Store) ListMessages(ctx context.Context, owner string, q store.MessageQuery) (store.MessagePage, error) {
	return listMessages(ctx, s.pool, owner, q)
}

func listMessages(ctx context.Context, q querier, owner string, mq store.MessageQuery) (store.MessagePage, error) {
	return store.CollectPage(mq, func(fn func(*mb.GroupMessageSave) error) error {
		return eachMessage(ctx, q, owner, mq, fn)
	})
}

// eachMessage runs one query and calls fn for each row as it arrives; with
// no limit it streams a whole group, the server sending rows ahead while fn
// works. fn must not query q meanwhile: the connection is busy.
func eachMessage(ctx context.Context, q querier, owner string, mq store.MessageQuery, fn func(*mb.GroupMessageSave) error) error {
	query, args := store.MessageSelect(owner, mq, func(i int) string { return "$" + strconv.Itoa(i) })
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("postgres: list messages: %w", err)
	}
	defer rows.Close()
	return store.EachMessageRow(rows, fn)
}

func (s *Store) DeleteMessage(ctx context.Context, owner string, groupID, id []byte, allow func(*mb.GroupMessageSave, *gb.GroupSave) error) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		// The group first, then the message, both locked: the order every
		// writer takes them in.
		g, err := getGroup(ctx, tx, owner, groupID, " FOR SHARE")
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("message %x in group %x: %w", id, groupID, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		var row store.MessageRow
		err = tx.QueryRow(ctx, messageSelect+` WHERE owner = $1 AND group_id = $2 AND id = $3 FOR UPDATE`, owner, groupID, id).Scan(row.Dest()...)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("message %x in group %x: %w", id, groupID, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("postgres: read message %x: %w", id, err)
		}
		if err := allow(row.Message(), g); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM messages WHERE owner = $1 AND id = $2`, owner, id); err != nil {
			return fmt.Errorf("postgres: delete message %x: %w", id, err)
		}
		return nil
	})
}

func (s *Store) MergeConsent(ctx context.Context, owner string, records []*cs.ConsentSave) ([]store.Outcome, error) {
	out := make([]store.Outcome, len(records))
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		for i, r := range records {
			// One statement decides and writes: xmax = 0 tells an insert
			// from an update, and no row back means the stored record won.
			var inserted bool
			err := tx.QueryRow(ctx, `INSERT INTO consent AS c (owner, entity_type, entity, state, consented_at_ns) VALUES ($1, $2, $3, $4, $5)
				ON CONFLICT (owner, entity_type, entity) DO UPDATE SET state = excluded.state, consented_at_ns = excluded.consented_at_ns
				WHERE excluded.consented_at_ns > c.consented_at_ns
				RETURNING (xmax = 0)`,
				owner, int16(r.GetEntityType()), r.GetEntity(), int16(r.GetState()), r.GetConsentedAtNs()).Scan(&inserted)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				out[i] = store.Unchanged
			case err != nil:
				return fmt.Errorf("postgres: write consent %s: %w", r.GetEntity(), err)
			case inserted:
				out[i] = store.Inserted
			default:
				out[i] = store.Updated
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (s *Store) ListConsent(ctx context.Context, owner string, after *store.ConsentKey, limit int) ([]*cs.ConsentSave, error) {
	return listConsent(ctx, s.pool, owner, after, limit)
}

func listConsent(ctx context.Context, q querier, owner string, after *store.ConsentKey, limit int) ([]*cs.ConsentSave, error) {
	query, args := `SELECT entity_type, state, entity, consented_at_ns FROM consent WHERE owner = $1`, []any{owner}
	if after != nil {
		query, args = query+` AND (entity_type, entity) > ($2, $3)`, append(args, int16(after.EntityType), after.Entity)
	}
	rows, err := q.Query(ctx, query+fmt.Sprintf(` ORDER BY entity_type, entity LIMIT %d`, limit), args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list consent: %w", err)
	}
	var out []*cs.ConsentSave
	var typ, state int16
	var entity string
	var at int64
	_, err = pgx.ForEachRow(rows, []any{&typ, &state, &entity, &at}, func() error {
		out = append(out, &cs.ConsentSave{EntityType: cs.ConsentTypeSave(typ), State: cs.ConsentStateSave(state), Entity: entity, ConsentedAtNs: at})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: list consent: %w", err)
	}
	return out, nil
}

func (s *Store) Snapshot(ctx context.Context, owner string, fn func(store.Snapshot) error) error {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("postgres: begin snapshot: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	return fn(store.Pager{
		Groups: func(ctx context.Context, after []byte, limit int) ([]*gb.GroupSave, error) {
			return listGroups(ctx, tx, owner, after, limit)
		},
		Messages: func(ctx context.Context, q store.MessageQuery, fn func(*mb.GroupMessageSave) error) error {
			return eachMessage(ctx, tx, owner, q, fn)
		},
		Consent: func(ctx context.Context, after *store.ConsentKey, limit int) ([]*cs.ConsentSave, error) {
			return listConsent(ctx, tx, owner, after, limit)
		},
	})
}
