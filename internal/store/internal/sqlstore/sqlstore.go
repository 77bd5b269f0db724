// Package sqlstore is the SQL both store engines share: the store.Store
// methods written once over a small adapter of each driver (Conn) and the
// few ways their SQL differs (Dialect). An engine embeds SQLStore and adds
// what it does its own way: the bulk append (COPY on Postgres, multi-row
// INSERT on SQLite), the consent merge, health and closing. It is internal
// to the store: only the engines build on it.
package sqlstore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/store"
)

// Conn is a connection pool or a transaction of one engine.
type Conn interface {
	QueryRow(ctx context.Context, query string, args ...any) Row
	// Query runs query and calls each with its rows, closing them after.
	Query(ctx context.Context, query string, args []any, each func(Rows) error) error
	Exec(ctx context.Context, query string, args ...any) (rowsAffected int64, err error)
}

// Row is one row of QueryRow; Scan returns the Dialect's NoRows when there
// was none.
type Row interface {
	Scan(dest ...any) error
}

// DB is how an engine hands out connections.
type DB interface {
	// Read is for reads outside a transaction.
	Read() Conn
	// Write runs fn in a read-write transaction, committing when fn
	// returns nil and returning fn's error as it is.
	Write(ctx context.Context, fn func(Conn) error) error
	// ReadSnapshot runs fn in a read-only transaction that sees one
	// instant of the database.
	ReadSnapshot(ctx context.Context, fn func(Conn) error) error
}

// Dialect is what differs between the engines' SQL.
type Dialect struct {
	// Name prefixes errors: "postgres", "sqlite".
	Name string
	// Placeholder writes the i-th parameter (1-based): "$1" or "?".
	Placeholder func(i int) string
	// NoRows is the driver's error for a QueryRow that found nothing.
	NoRows error
	// ForUpdate and ForShare lock the rows a SELECT reads in a write
	// transaction until it ends. SQLite's write transaction holds the
	// whole database, so it needs neither.
	ForUpdate, ForShare string
	// SkipLocked follows ForUpdate where a reader would rather pass over
	// a row another transaction holds than wait for it (a job being
	// claimed).
	SkipLocked string
	// LockKey takes a lock on a string key until the write transaction
	// ends (Postgres: a transaction-level advisory lock), for checks that
	// no row can lock, such as a job's start against an erasure that has
	// no row yet. Empty where the write transaction holds the whole
	// database (SQLite).
	LockKey string
}

// bind writes query's ? placeholders in the dialect.
func (d Dialect) bind(query string) string {
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString(d.Placeholder(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// SQLStore implements the Store methods both engines share, by area: a
// type for each, every one over the same connections and dialect.
type SQLStore struct {
	sqlBase
	groupsSQL
	changesSQL
	jobsSQL
	backupsSQL
	keysSQL
	ownersSQL
	historySQL
}

// sqlBase is what every area shares: the engine's connections, its
// dialect, the fixed statements, and the few methods every area calls.
type sqlBase struct {
	db DB
	d  Dialect
	q  statements
}

// The areas, each in its files: groups, messages and consent as the
// devices write them (sqlstore.go, lookup.go, expiry.go); what restores
// replace and the tombstones increments read (replace.go, tombstones.go);
// jobs and schedule ticks (jobs.go, ticks.go); the backup catalog
// (backups.go); owner keys and KEKs (keys.go); holds and erasure
// (owners.go); history files (history.go).
type (
	groupsSQL  struct{ sqlBase }
	changesSQL struct{ sqlBase }
	jobsSQL    struct{ sqlBase }
	backupsSQL struct{ sqlBase }
	keysSQL    struct{ sqlBase }
	ownersSQL  struct{ sqlBase }
	historySQL struct{ sqlBase }
)

// statements are the fixed statements, bound once in the dialect.
type statements struct {
	groupByID, groupInsert, groupUpsert, groupInsertNew       string
	groupLastMessage, groupSetLastMessage, groupSetState      string
	messageByID, messageDelete, consentPage, consentPageAfter string
	nextChange, changeSeq                                     string
}

// NewSQLStore shares SQL over an engine's connections.
func NewSQLStore(db DB, d Dialect) SQLStore {
	values := "(" + strings.TrimSuffix(strings.Repeat("?, ", store.GroupColumnCount+2), ", ") + ")"
	insert := `INSERT INTO groups (owner, ` + store.GroupColumns + `, change_seq) VALUES ` + values
	consent := `SELECT entity_type, state, entity, consented_at_ns FROM consent WHERE owner = ?`
	base := sqlBase{db: db, d: d, q: statements{
		groupByID:   d.bind(`SELECT ` + store.GroupColumns + ` FROM groups WHERE owner = ? AND id = ?`),
		groupInsert: d.bind(insert),
		groupUpsert: d.bind(insert + ` ON CONFLICT (owner, id) DO UPDATE SET ` + store.UpsertSet(store.GroupColumns+`, change_seq`)),
		// Two imports of the same group at once: the second one's insert
		// finds the first one's row and leaves it.
		groupInsertNew:      d.bind(insert + ` ON CONFLICT (owner, id) DO NOTHING`),
		groupLastMessage:    d.bind(`SELECT last_message_ns FROM groups WHERE owner = ? AND id = ?` + d.ForUpdate),
		groupSetLastMessage: d.bind(`UPDATE groups SET last_message_ns = ?, change_seq = ? WHERE owner = ? AND id = ?`),
		groupSetState:       d.bind(`UPDATE groups SET membership_state = ?, change_seq = ? WHERE owner = ? AND id = ?`),
		messageByID:         d.bind(`SELECT ` + store.MessageColumns + ` FROM messages WHERE owner = ? AND group_id = ? AND id = ?` + d.ForUpdate),
		messageDelete:       d.bind(`DELETE FROM messages WHERE owner = ? AND id = ?`),
		consentPage:         d.bind(consent + ` AND change_seq > ? ORDER BY entity_type, entity LIMIT ?`),
		consentPageAfter:    d.bind(consent + ` AND change_seq > ? AND (entity_type, entity) > (?, ?) ORDER BY entity_type, entity LIMIT ?`),
		nextChange:          d.bind(store.NextChangeSQL),
		changeSeq:           d.bind(store.ChangeSeqSQL),
	}}
	return SQLStore{sqlBase: base, groupsSQL: groupsSQL{base}, changesSQL: changesSQL{base}, jobsSQL: jobsSQL{base},
		backupsSQL: backupsSQL{base}, keysSQL: keysSQL{base}, ownersSQL: ownersSQL{base}, historySQL: historySQL{base}}
}

// Dialect returns the dialect the store writes.
func (s sqlBase) Dialect() Dialect { return s.d }

// NextChange raises owner's change sequence in tx and returns the value
// to stamp the transaction's rows with. It must come before the
// transaction locks any of the owner's rows: every writer takes the
// counter first, so none waits for it while holding what another needs.
func (s sqlBase) NextChange(ctx context.Context, tx Conn, owner string) (int64, error) {
	var seq int64
	if err := tx.QueryRow(ctx, s.q.nextChange, owner).Scan(&seq); err != nil {
		return 0, fmt.Errorf("%s: next change: %w", s.d.Name, err)
	}
	return seq, nil
}

func (s sqlBase) changeSeqOf(ctx context.Context, c Conn, owner string) (int64, error) {
	var seq int64
	err := c.QueryRow(ctx, s.q.changeSeq, owner).Scan(&seq)
	if errors.Is(err, s.d.NoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%s: read change sequence: %w", s.d.Name, err)
	}
	return seq, nil
}

func (s sqlBase) getGroup(ctx context.Context, c Conn, owner string, id []byte, lock string) (*gb.GroupSave, error) {
	var row store.GroupRow
	err := c.QueryRow(ctx, s.q.groupByID+lock, owner, id).Scan(row.Dest()...)
	if errors.Is(err, s.d.NoRows) {
		return nil, fmt.Errorf("group %x: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: read group %x: %w", s.d.Name, id, err)
	}
	return row.Group()
}

func (s groupsSQL) GetGroup(ctx context.Context, owner string, id []byte) (*gb.GroupSave, error) {
	return s.getGroup(ctx, s.db.Read(), owner, id, "")
}

func (s groupsSQL) PutGroup(ctx context.Context, owner string, g *gb.GroupSave) (created bool, err error) {
	return s.writeGroup(ctx, owner, g, store.CheckPut)
}

// writeGroup creates or overwrites g when check allows it over the stored
// group (nil when there is none), as one change of the owner.
func (s sqlBase) writeGroup(ctx context.Context, owner string, g *gb.GroupSave, check func(stored *gb.GroupSave) error) (created bool, err error) {
	args, err := store.GroupArgs(g)
	if err != nil {
		return false, err
	}
	err = s.db.Write(ctx, func(tx Conn) error {
		seq, err := s.NextChange(ctx, tx, owner)
		if err != nil {
			return err
		}
		old, err := s.getGroup(ctx, tx, owner, g.GetId(), s.d.ForUpdate)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if err := check(old); err != nil {
			return err
		}
		created = old == nil
		if _, err := tx.Exec(ctx, s.q.groupUpsert, append(append([]any{owner}, args...), seq)...); err != nil {
			return fmt.Errorf("%s: write group %x: %w", s.d.Name, g.GetId(), err)
		}
		return s.groupChanged(ctx, tx, owner, old, g, seq)
	})
	return created, err
}

func (s groupsSQL) ListGroups(ctx context.Context, owner string, after []byte, limit int) ([]*gb.GroupSave, error) {
	return s.listGroups(ctx, s.db.Read(), owner, after, limit, nil)
}

func (s groupsSQL) listGroups(ctx context.Context, c Conn, owner string, after []byte, limit int, changedAfter *int64) ([]*gb.GroupSave, error) {
	query, args := store.GroupSelect(owner, after, limit, changedAfter, s.d.Placeholder)
	var out []*gb.GroupSave
	err := c.Query(ctx, query, args, func(rows Rows) (err error) {
		out, err = collectGroups(rows)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: list groups: %w", s.d.Name, err)
	}
	return out, nil
}

func (s groupsSQL) ActivateGroup(ctx context.Context, owner string, id []byte) (g *gb.GroupSave, activated bool, err error) {
	err = s.db.Write(ctx, func(tx Conn) error {
		seq, err := s.NextChange(ctx, tx, owner)
		if err != nil {
			return err
		}
		if g, err = s.getGroup(ctx, tx, owner, id, s.d.ForUpdate); err != nil {
			return err
		}
		was := proto.Clone(g).(*gb.GroupSave)
		if activated, err = store.Activate(g); err != nil || !activated {
			return err
		}
		if _, err := tx.Exec(ctx, s.q.groupSetState, int32(g.MembershipState), seq, owner, id); err != nil {
			return fmt.Errorf("%s: activate group %x: %w", s.d.Name, id, err)
		}
		return s.groupChanged(ctx, tx, owner, was, g, seq)
	})
	if err != nil {
		return nil, false, err
	}
	return g, activated, nil
}

func (s groupsSQL) MergeGroups(ctx context.Context, owner string, groups []*gb.GroupSave) ([]store.Outcome, error) {
	out := make([]store.Outcome, len(groups))
	err := s.db.Write(ctx, func(tx Conn) error {
		seq, err := s.NextChange(ctx, tx, owner)
		if err != nil {
			return err
		}
		for i, g := range groups {
			if out[i], err = s.mergeGroup(ctx, tx, owner, g, seq); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// mergeGroup applies one imported group (ARCH-013, ARCH-014): a new group
// is inserted store.Restored; a known one only moves its last message time on.
func (s groupsSQL) mergeGroup(ctx context.Context, tx Conn, owner string, g *gb.GroupSave, seq int64) (store.Outcome, error) {
	var last *int64
	err := tx.QueryRow(ctx, s.q.groupLastMessage, owner, g.GetId()).Scan(&last)
	switch {
	case errors.Is(err, s.d.NoRows):
		args, err := store.GroupArgs(store.Restored(g))
		if err != nil {
			return 0, fmt.Errorf("group %x: %w", g.GetId(), err)
		}
		n, err := tx.Exec(ctx, s.q.groupInsertNew, append(append([]any{owner}, args...), seq)...)
		if err != nil {
			return 0, fmt.Errorf("%s: insert group %x: %w", s.d.Name, g.GetId(), err)
		}
		if n == 1 {
			return store.Inserted, nil
		}
		return store.Unchanged, nil
	case err != nil:
		return 0, fmt.Errorf("%s: read group %x: %w", s.d.Name, g.GetId(), err)
	case store.Later(g.LastMessageNs, last):
		if _, err := tx.Exec(ctx, s.q.groupSetLastMessage, g.GetLastMessageNs(), seq, owner, g.GetId()); err != nil {
			return 0, fmt.Errorf("%s: update group %x: %w", s.d.Name, g.GetId(), err)
		}
		return store.Updated, nil
	default:
		return store.Unchanged, nil
	}
}

func (s groupsSQL) ListMessages(ctx context.Context, owner string, q store.MessageQuery) (store.MessagePage, error) {
	return store.CollectPage(q, func(fn func(*mb.GroupMessageSave) error) error {
		return s.eachMessage(ctx, s.db.Read(), owner, q, fn)
	})
}

func (s groupsSQL) StreamMessages(ctx context.Context, owner string, q store.MessageQuery, fn func(*mb.GroupMessageSave) error) (full bool, err error) {
	return store.StreamPage(q, func(each func(*mb.GroupMessageSave) error) error {
		return s.eachMessage(ctx, s.db.Read(), owner, q, each)
	}, fn)
}

// eachMessage runs one query and calls fn for each row as it arrives; with
// no limit it streams a whole group. fn must not query c meanwhile: the
// connection is busy.
func (s groupsSQL) eachMessage(ctx context.Context, c Conn, owner string, q store.MessageQuery, fn func(*mb.GroupMessageSave) error) error {
	query, args := store.MessageSelect(owner, q, s.d.Placeholder)
	var callers error // fn's own error, which already says what failed
	err := c.Query(ctx, query, args, func(rows Rows) error {
		return eachMessageRow(rows, func(m *mb.GroupMessageSave) error {
			callers = fn(m)
			return callers
		})
	})
	switch {
	case callers != nil:
		return callers
	case err != nil:
		return fmt.Errorf("%s: list messages: %w", s.d.Name, err)
	}
	return nil
}

func (s groupsSQL) DeleteMessage(ctx context.Context, owner string, groupID, id []byte, allow func(*mb.GroupMessageSave, *gb.GroupSave) error) error {
	return s.db.Write(ctx, func(tx Conn) error {
		// The change first (NextChange), then the group, then the
		// message, both locked: the order every writer takes them in.
		seq, err := s.NextChange(ctx, tx, owner)
		if err != nil {
			return err
		}
		g, err := s.getGroup(ctx, tx, owner, groupID, s.d.ForShare)
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("message %x in group %x: %w", id, groupID, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		var row store.MessageRow
		err = tx.QueryRow(ctx, s.q.messageByID, owner, groupID, id).Scan(row.Dest()...)
		if errors.Is(err, s.d.NoRows) {
			return fmt.Errorf("message %x in group %x: %w", id, groupID, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("%s: read message %x: %w", s.d.Name, id, err)
		}
		if err := allow(row.Message(), g); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, s.q.messageDelete, owner, id); err != nil {
			return fmt.Errorf("%s: delete message %x: %w", s.d.Name, id, err)
		}
		m := row.Message()
		return s.bury(ctx, tx, owner, groupID, store.TombstoneKey{SentAtNs: m.GetSentAtNs(), ID: m.GetId()}, seq)
	})
}

func (s groupsSQL) ListConsent(ctx context.Context, owner string, after *store.ConsentKey, limit int) ([]*cs.ConsentSave, error) {
	return s.listConsent(ctx, s.db.Read(), owner, after, limit, nil)
}

func (s groupsSQL) listConsent(ctx context.Context, c Conn, owner string, after *store.ConsentKey, limit int, changedAfter *int64) ([]*cs.ConsentSave, error) {
	// Every stamp is at least 0: -1 keeps every record.
	since := int64(-1)
	if changedAfter != nil {
		since = *changedAfter
	}
	query, args := s.q.consentPage, []any{owner, since, limit}
	if after != nil {
		query, args = s.q.consentPageAfter, []any{owner, since, int32(after.EntityType), after.Entity, limit}
	}
	var out []*cs.ConsentSave
	err := c.Query(ctx, query, args, func(rows Rows) error {
		for rows.Next() {
			var typ, state int32
			r := &cs.ConsentSave{}
			if err := rows.Scan(&typ, &state, &r.Entity, &r.ConsentedAtNs); err != nil {
				return err
			}
			r.EntityType, r.State = cs.ConsentTypeSave(typ), cs.ConsentStateSave(state)
			out = append(out, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("%s: list consent: %w", s.d.Name, err)
	}
	return out, nil
}

func (s groupsSQL) Snapshot(ctx context.Context, owner string, fn func(store.Snapshot) error) error {
	return s.db.ReadSnapshot(ctx, func(tx Conn) error {
		return fn(store.Pager{
			Groups: func(ctx context.Context, after []byte, limit int, changedAfter *int64) ([]*gb.GroupSave, error) {
				return s.listGroups(ctx, tx, owner, after, limit, changedAfter)
			},
			Messages: func(ctx context.Context, q store.MessageQuery, fn func(*mb.GroupMessageSave) error) error {
				return s.eachMessage(ctx, tx, owner, q, fn)
			},
			Consent: func(ctx context.Context, after *store.ConsentKey, limit int, changedAfter *int64) ([]*cs.ConsentSave, error) {
				return s.listConsent(ctx, tx, owner, after, limit, changedAfter)
			},
			Seq: func(ctx context.Context) (int64, error) { return s.changeSeqOf(ctx, tx, owner) },
		})
	})
}

// probePad is what a probe writes while the store is out of space:
// incompressible, and as large as a full AppendMessages batch of ordinary
// messages, so a store with only crumbs of room left stays not ready
// rather than flapping between a small probe that fits and the next
// batch that does not.
const probePad = 1 << 20

// Probe is ProbeWrite for an engine whose writes space watches. In the
// normal state it upserts the one row of store_probe: the cheapest write
// that proves the store takes writes (a read-only standby does not).
// After a write was refused for space, it inserts a padded row and
// deletes it in one transaction, and clears space's state only when that
// succeeds.
func (s sqlBase) Probe(ctx context.Context, space *store.SpaceWatch) error {
	if !space.Full() {
		if _, err := s.exec(ctx, s.d.bind(`INSERT INTO store_probe (id, at_ns, pad) VALUES (1, ?, ?) ON CONFLICT (id) DO UPDATE SET at_ns = excluded.at_ns`), time.Now().UnixNano(), []byte{}); err != nil {
			return fmt.Errorf("%s: probe write: %w", s.d.Name, err)
		}
		return nil
	}
	pad := make([]byte, probePad)
	_, _ = rand.Read(pad)
	err := s.db.Write(ctx, func(tx Conn) error {
		if _, err := tx.Exec(ctx, s.d.bind(`INSERT INTO store_probe (id, at_ns, pad) VALUES (2, ?, ?)`), time.Now().UnixNano(), pad); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, s.d.bind(`DELETE FROM store_probe WHERE id = 2`))
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: probe write (out of space): %w", s.d.Name, err)
	}
	space.Cleared()
	return nil
}
