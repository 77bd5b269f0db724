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
type Pager struct {
	Groups   func(ctx context.Context, after []byte, limit int) ([]*gb.GroupSave, error)
	Messages func(ctx context.Context, q MessageQuery, fn func(*mb.GroupMessageSave) error) error
	Consent  func(ctx context.Context, after *ConsentKey, limit int) ([]*cs.ConsentSave, error)
}

var _ Snapshot = Pager{}

func (p Pager) EachGroup(ctx context.Context, fn func(*gb.GroupSave) error) error {
	var after []byte
	for {
		page, err := p.Groups(ctx, after, SnapshotPageSize)
		if err != nil {
			return err
		}
		for _, g := range page {
			if err := fn(g); err != nil {
				return err
			}
		}
		if len(page) < SnapshotPageSize {
			return nil
		}
		after = page[len(page)-1].GetId()
	}
}

func (p Pager) EachMessage(ctx context.Context, q MessageQuery, fn func(*mb.GroupMessageSave) error) error {
	q.After, q.Limit = nil, 0
	return p.Messages(ctx, q, fn)
}

func (p Pager) EachConsent(ctx context.Context, fn func(*cs.ConsentSave) error) error {
	var after *ConsentKey
	for {
		page, err := p.Consent(ctx, after, SnapshotPageSize)
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
		last := page[len(page)-1]
		after = &ConsentKey{EntityType: last.GetEntityType(), Entity: last.GetEntity()}
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
