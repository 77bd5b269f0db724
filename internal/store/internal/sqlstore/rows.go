package sqlstore

import (
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/store"
)

// collectGroups scans every row of a GroupSelect query; its errors are
// the driver's, for the caller to wrap.
func collectGroups(rows Rows) ([]*gb.GroupSave, error) {
	var out []*gb.GroupSave
	for rows.Next() {
		var row store.GroupRow
		if err := rows.Scan(row.Dest()...); err != nil {
			return nil, err
		}
		g, err := row.Group()
		if err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, rows.Err()
}

// Rows is what both drivers' result sets offer.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

const rowSlab = 64

// eachMessageRow scans each row of a MessageSelect query as it arrives and
// calls fn with its record. fn's errors come back as they are, the
// driver's for the caller to wrap.
func eachMessageRow(rows Rows, fn func(*mb.GroupMessageSave) error) error {
	var (
		dest []any
		slab []store.MessageRow
	)
	for rows.Next() {
		// Rows are allocated rowSlab at a time: one allocation a row was
		// a sixth of a listed message's. A slab lives while any of its
		// records does; a page or an export batch holds them together.
		if len(slab) == 0 {
			slab = make([]store.MessageRow, rowSlab)
		}
		row := &slab[0]
		slab = slab[1:]
		dest = row.DestInto(dest)
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		if err := fn(row.Message()); err != nil {
			return err
		}
	}
	return rows.Err()
}
