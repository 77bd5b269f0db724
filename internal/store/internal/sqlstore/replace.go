package sqlstore

import (
	"context"
	"errors"
	"fmt"

	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	"github.com/contentbackup/contentbackup/internal/store"
)

// The writes of a restore in replace mode (store.Replacing).

func (s changesSQL) ReplaceGroup(ctx context.Context, owner string, g *gb.GroupSave) error {
	// Over any stored group, a Restored one too.
	_, err := s.writeGroup(ctx, owner, g, func(*gb.GroupSave) error { return nil })
	return err
}

func (s changesSQL) DeleteGroup(ctx context.Context, owner string, id []byte) error {
	return s.db.Write(ctx, func(tx Conn) error {
		seq, err := s.NextChange(ctx, tx, owner)
		if err != nil {
			return err
		}
		if _, err := s.getGroup(ctx, tx, owner, id, s.d.ForUpdate); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, s.d.bind(`DELETE FROM messages WHERE owner = ? AND group_id = ?`), owner, id); err != nil {
			return fmt.Errorf("%s: delete the messages of group %x: %w", s.d.Name, id, err)
		}
		if _, err := tx.Exec(ctx, s.d.bind(`DELETE FROM groups WHERE owner = ? AND id = ?`), owner, id); err != nil {
			return fmt.Errorf("%s: delete group %x: %w", s.d.Name, id, err)
		}
		return s.bury(ctx, tx, owner, id, store.TombstoneKey{SentAtNs: store.GroupTombstoneSentAt}, seq)
	})
}

func (s changesSQL) DeleteMessageByID(ctx context.Context, owner string, id []byte) (found bool, err error) {
	err = s.db.Write(ctx, func(tx Conn) error {
		seq, err := s.NextChange(ctx, tx, owner)
		if err != nil {
			return err
		}
		var group []byte
		var sentAt int64
		err = tx.QueryRow(ctx, s.d.bind(`SELECT group_id, sent_at_ns FROM messages WHERE owner = ? AND id = ?`+s.d.ForUpdate), owner, id).Scan(&group, &sentAt)
		if errors.Is(err, s.d.NoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: read message %x: %w", s.d.Name, id, err)
		}
		if _, err := tx.Exec(ctx, s.q.messageDelete, owner, id); err != nil {
			return fmt.Errorf("%s: delete message %x: %w", s.d.Name, id, err)
		}
		found = true
		return s.bury(ctx, tx, owner, group, store.TombstoneKey{SentAtNs: sentAt, ID: id}, seq)
	})
	return found, err
}

func (s changesSQL) ReplaceConsent(ctx context.Context, owner string, records []*cs.ConsentSave) error {
	return s.db.Write(ctx, func(tx Conn) error {
		seq, err := s.NextChange(ctx, tx, owner)
		if err != nil {
			return err
		}
		for _, r := range records {
			if _, err := tx.Exec(ctx, s.d.bind(`INSERT INTO consent (owner, entity_type, entity, state, consented_at_ns, change_seq) VALUES (?, ?, ?, ?, ?, ?)
				ON CONFLICT (owner, entity_type, entity) DO UPDATE SET state = excluded.state, consented_at_ns = excluded.consented_at_ns, change_seq = excluded.change_seq`),
				owner, int32(r.GetEntityType()), r.GetEntity(), int32(r.GetState()), r.GetConsentedAtNs(), seq); err != nil {
				return fmt.Errorf("%s: replace consent: %w", s.d.Name, err)
			}
		}
		return nil
	})
}

func (s changesSQL) DeleteConsent(ctx context.Context, owner string, keys []store.ConsentKey) error {
	return s.db.Write(ctx, func(tx Conn) error {
		if _, err := s.NextChange(ctx, tx, owner); err != nil {
			return err
		}
		for _, k := range keys {
			if _, err := tx.Exec(ctx, s.d.bind(`DELETE FROM consent WHERE owner = ? AND entity_type = ? AND entity = ?`), owner, int32(k.EntityType), k.Entity); err != nil {
				return fmt.Errorf("%s: delete consent: %w", s.d.Name, err)
			}
		}
		return nil
	})
}

func (s changesSQL) RaiseBaseFloor(ctx context.Context, owner string) (floor int64, err error) {
	err = s.db.Write(ctx, func(tx Conn) error {
		if floor, err = s.NextChange(ctx, tx, owner); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, s.d.bind(`UPDATE owner_changes SET base_floor = ? WHERE owner = ?`), floor, owner); err != nil {
			return fmt.Errorf("%s: raise the base floor: %w", s.d.Name, err)
		}
		return nil
	})
	return floor, err
}

func (s changesSQL) BaseFloor(ctx context.Context, owner string) (int64, error) {
	var floor int64
	err := s.db.Read().QueryRow(ctx, s.d.bind(`SELECT base_floor FROM owner_changes WHERE owner = ?`), owner).Scan(&floor)
	if errors.Is(err, s.d.NoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%s: read the base floor: %w", s.d.Name, err)
	}
	return floor, nil
}
