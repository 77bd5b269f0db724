package store

import (
	"context"
	"strings"

	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
)

// SnapshotPageSize is how many rows a Pager reads per query.
const SnapshotPageSize = 1000

// Pager is a Snapshot built from an engine's reads, each bound to one read
// transaction. Groups and consent come in keyset pages, so that the
// function called for each may read the snapshot (export reads a group's
// messages inside its group loop); a group's messages come from one
// streaming query, the database sending rows ahead while they are written
// out, so the function called for each message must not read the snapshot.
//
// The page reads take changedAfter: nil for every record, or the point of
// the owner's change sequence after which a record must have been written
// (Snapshot.ChangedAfter).
type Pager struct {
	Groups   func(ctx context.Context, after []byte, limit int, changedAfter *int64) ([]*gb.GroupSave, error)
	Messages func(ctx context.Context, q MessageQuery, fn func(*mb.GroupMessageSave) error) error
	Consent  func(ctx context.Context, after *ConsentKey, limit int, changedAfter *int64) ([]*cs.ConsentSave, error)
	// Seq reads the owner's change sequence in the snapshot.
	Seq func(ctx context.Context) (int64, error)
	// changedAfter is the filter ChangedAfter set.
	changedAfter *int64
}

var _ Snapshot = Pager{}

func (p Pager) ChangeSeq(ctx context.Context) (int64, error) { return p.Seq(ctx) }

func (p Pager) ChangedAfter(seq int64) Snapshot {
	p.changedAfter = &seq
	return p
}

func (p Pager) EachGroup(ctx context.Context, fn func(*gb.GroupSave) error) error {
	read := func(ctx context.Context, after []byte, limit int) ([]*gb.GroupSave, error) {
		return p.Groups(ctx, after, limit, p.changedAfter)
	}
	return eachPage(ctx, read, func(g *gb.GroupSave) []byte { return g.GetId() }, fn)
}

func (p Pager) EachMessage(ctx context.Context, q MessageQuery, fn func(*mb.GroupMessageSave) error) error {
	q.After, q.Limit, q.ChangedAfter = nil, 0, p.changedAfter
	return p.Messages(ctx, q, fn)
}

func (p Pager) EachConsent(ctx context.Context, fn func(*cs.ConsentSave) error) error {
	read := func(ctx context.Context, after *ConsentKey, limit int) ([]*cs.ConsentSave, error) {
		return p.Consent(ctx, after, limit, p.changedAfter)
	}
	return eachPage(ctx, read, func(r *cs.ConsentSave) *ConsentKey {
		return &ConsentKey{EntityType: r.GetEntityType(), Entity: r.GetEntity()}
	}, fn)
}

// eachPage calls fn for every record of keyset pages read by read, each
// page starting after the key of the last record of the one before.
func eachPage[T, K any](ctx context.Context, read func(context.Context, K, int) ([]T, error), keyOf func(T) K, fn func(T) error) error {
	var after K
	for {
		page, err := read(ctx, after, SnapshotPageSize)
		if err != nil {
			return err
		}
		for _, r := range page {
			if err := fn(r); err != nil {
				return err
			}
		}
		if len(page) < SnapshotPageSize {
			return nil
		}
		after = keyOf(page[len(page)-1])
	}
}

// UpsertSet is the SET list of an upsert that replaces every column of
// columns but id with the excluded (proposed) row's.
func UpsertSet(columns string) string {
	var sets []string
	for _, c := range strings.Split(columns, ",") {
		c = strings.TrimSpace(c)
		if c != "id" {
			sets = append(sets, c+" = excluded."+c)
		}
	}
	return strings.Join(sets, ", ")
}
