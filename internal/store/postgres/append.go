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

	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/store"
)

var (
	// messageAppend inserts a batch given as one array per column, in
	// input order, and returns the ids it stored.
	messageAppend = `INSERT INTO messages (owner, ` + store.MessageInsertColumns + `)
		SELECT $1, ` + prefixed("u.", store.MessageColumns) + `, $20, $21 FROM unnest($2::bytea[], $3::bytea[], $4::bytea[], $5::bigint[], $6::smallint[],
			$7::bytea[], $8::text[], $9::smallint[], $10::smallint[], $11::integer[], $12::integer[], $13::text[],
			$14::bytea[], $15::bigint[], $16::bigint[], $17::text[], $18::bigint[], $19::boolean[])
			WITH ORDINALITY AS u(` + store.MessageColumns + `, ord)
		ORDER BY u.ord
		ON CONFLICT (owner, id) DO NOTHING
		RETURNING id`
)

// nextChange is store.NextChangeSQL in Postgres' placeholders.
var nextChange = strings.Replace(store.NextChangeSQL, "?", "$1", 1)

// nextChangeIn raises owner's change sequence first thing in tx (see
// sqlstore.NextChange for why first).
func nextChangeIn(ctx context.Context, tx pgx.Tx, owner string) (int64, error) {
	var seq int64
	if err := tx.QueryRow(ctx, nextChange, owner).Scan(&seq); err != nil {
		return 0, fmt.Errorf("postgres: next change: %w", err)
	}
	return seq, nil
}

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

func (s *Store) AppendMessages(ctx context.Context, owner string, msgs []*mb.GroupMessageSave, opts store.AppendOptions) ([]store.Outcome, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	store.Derive(msgs)
	var out []store.Outcome
	err := inTx(ctx, s.pool, s.space, func(tx pgx.Tx) error {
		seq, err := nextChangeIn(ctx, tx, owner)
		if err != nil {
			return err
		}
		if err := checkGroups(ctx, tx, owner, msgs, opts); err != nil {
			return err
		}
		if s.citus && len(msgs) <= citusValuesRows {
			out, err = appendCitus(ctx, tx, owner, msgs, opts.AllowRestored, seq)
			return err
		}
		out, err = copyNew(ctx, tx, owner, msgs, opts, seq)
		if errors.Is(err, errIDStored) {
			out, err = insertNew(ctx, tx, owner, msgs, opts.AllowRestored, seq)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// errIDStored: an id copyNew took for absent is stored: by another
// transaction meanwhile, or already (unlooked-up, with MostlyNew).
var errIDStored = errors.New("a message id was inserted concurrently")

// storedIDs are those of the ids $2 that owner $1 has: one probe of the
// primary key per id, whatever the plan. The form "owner = $1 AND id =
// ANY($2)" fell, under a generic plan (a pooled connection's cached
// statement), into reading every message of the owner and filtering by
// id (issue 52); a LATERAL lookup with LIMIT 1 cannot be turned into
// that.
const storedIDs = `SELECT u.id FROM unnest($2::bytea[]) AS u(id),
	LATERAL (SELECT 1 FROM messages m WHERE m.owner = $1 AND m.id = u.id LIMIT 1) AS found`

// copyNew is the fast path of an append: find which ids are stored, then
// COPY the rest, the first occurrence of each id in the batch. A
// concurrent insert of one of them makes COPY fail on the primary key; the
// savepoint is rolled back and insertNew, which tolerates it, runs instead.
//
// With opts.MostlyNew the lookup is skipped: looking up ids the owner does
// not have probes the primary key at random, which for an import into a
// new owner cost Postgres as much as the COPY. A stored id then fails the
// COPY like a concurrent insert does, and insertNew sorts the batch out.
func copyNew(ctx context.Context, tx pgx.Tx, owner string, msgs []*mb.GroupMessageSave, opts store.AppendOptions, seq int64) ([]store.Outcome, error) {
	known := make(map[string]bool, len(msgs))
	if !opts.MostlyNew {
		ids := make([][]byte, len(msgs))
		for i, m := range msgs {
			ids[i] = m.GetId()
		}
		rows, err := tx.Query(ctx, storedIDs, owner, ids)
		if err != nil {
			return nil, fmt.Errorf("postgres: read message ids: %w", err)
		}
		var id []byte
		if _, err := pgx.ForEachRow(rows, []any{&id}, func() error { known[string(id)] = true; return nil }); err != nil {
			return nil, fmt.Errorf("postgres: read message ids: %w", err)
		}
	}
	restored := opts.AllowRestored
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
		return append([]any{owner}, store.MessageInsertArgs(fresh[i], restored, seq)...), nil
	}))
	switch {
	case uniqueViolation(err):
		if rerr := sp.Rollback(ctx); rerr != nil {
			return nil, fmt.Errorf("postgres: rollback to savepoint: %w", rerr)
		}
		return nil, errIDStored
	case err != nil:
		return nil, fmt.Errorf("postgres: append messages: %w", err)
	}
	if err := sp.Commit(ctx); err != nil {
		return nil, fmt.Errorf("postgres: release savepoint: %w", err)
	}
	return out, nil
}

// uniqueViolation reports a unique constraint refusing a row. Citus
// relays a worker's refusal of a COPY row as an internal error (XX000)
// with the worker's message, not as 23505.
func uniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	return pgErr.Code == "23505" ||
		pgErr.Code == "XX000" && strings.HasPrefix(pgErr.Message, "duplicate key value violates unique constraint")
}

// insertNew inserts the batch in one statement that leaves stored ids
// alone and returns the ids it stored.
func insertNew(ctx context.Context, tx pgx.Tx, owner string, msgs []*mb.GroupMessageSave, restored bool, seq int64) ([]store.Outcome, error) {
	rows, err := tx.Query(ctx, messageAppend, append(append([]any{owner}, columnsOf(msgs)...), restored, seq)...)
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

// citusValuesRows is the largest append that goes as INSERT ... VALUES
// on Citus; larger ones COPY.
const citusValuesRows = 64

// appendCitus is a small append on Citus: one multi-row INSERT ...
// VALUES, which Citus routes to the owner's shard and commits there in
// one phase. Citus commits a COPY in two phases even on one shard; a
// worker stopped between its PREPARE and COMMIT PREPARED keeps the
// prepared transaction, and with it the lock on the owner's change
// sequence, over its restart until Citus's recovery runs
// (citus.recover_2pc_interval, a minute by default): every write of that
// owner waited out the minute (make citus's worker test, issue 45's CI
// run). VALUES costs Citus a deparse of every row, so a bulk append (an
// import's batch) still COPYs: 17,000 msgs/s against 53,000 at 1,000 a
// call (make bench-citus). msgs holds at most citusValuesRows.
func appendCitus(ctx context.Context, tx pgx.Tx, owner string, msgs []*mb.GroupMessageSave, restored bool, seq int64) ([]store.Outcome, error) {
	out := make([]store.Outcome, len(msgs))
	first := make(map[string]bool, len(msgs))
	args := []any{owner, restored, seq}
	for _, m := range msgs {
		if !first[string(m.GetId())] { // the first occurrence of an id is the one stored
			first[string(m.GetId())] = true
			args = append(args, store.MessageArgs(m)...)
		}
	}
	rows, err := tx.Query(ctx, citusInsert(len(first)), args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: append messages: %w", err)
	}
	inserted := make(map[string]bool, len(first))
	var id []byte
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error { inserted[string(id)] = true; return nil }); err != nil {
		return nil, fmt.Errorf("postgres: append messages: %w", err)
	}
	for i, m := range msgs {
		out[i] = store.Unchanged
		if inserted[string(m.GetId())] {
			out[i] = store.Inserted
			delete(inserted, string(m.GetId()))
		}
	}
	return out, nil
}

// citusInsert is appendCitus's statement for n rows: $1 the owner, $2
// restored, $3 the change sequence, then each row's message columns.
func citusInsert(n int) string {
	var b strings.Builder
	b.WriteString("INSERT INTO messages (owner, " + store.MessageInsertColumns + ") VALUES ")
	p := 4
	for r := range n {
		if r > 0 {
			b.WriteString(", ")
		}
		b.WriteString("($1")
		for range store.MessageColumnCount {
			b.WriteString(", $" + strconv.Itoa(p))
			p++
		}
		b.WriteString(", $2, $3)")
	}
	b.WriteString(" ON CONFLICT (owner, id) DO NOTHING RETURNING id")
	return b.String()
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

// MessagesExist reports, for each id in order, whether owner has it:
// storedIDs over pages of the ids, a probe of the primary key each
// whatever the plan (the shared form's id IN (...) falls into the same
// generic plan as ANY($2) did).
func (s *Store) MessagesExist(ctx context.Context, owner string, ids [][]byte) ([]bool, error) {
	out := make([]bool, len(ids))
	for start := 0; start < len(ids); start += existBatch {
		batch := ids[start:min(start+existBatch, len(ids))]
		rows, err := s.pool.Query(ctx, storedIDs, owner, batch)
		if err != nil {
			return nil, fmt.Errorf("postgres: messages exist: %w", connLost(err))
		}
		found := make(map[string]bool, len(batch))
		var id []byte
		if _, err := pgx.ForEachRow(rows, []any{&id}, func() error { found[string(id)] = true; return nil }); err != nil {
			return nil, fmt.Errorf("postgres: messages exist: %w", connLost(err))
		}
		for i, id := range batch {
			out[start+i] = found[string(id)]
		}
	}
	return out, nil
}

// existBatch bounds the ids of one MessagesExist statement.
const existBatch = 1000
