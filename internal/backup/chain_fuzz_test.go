package backup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	"github.com/contentbackup/contentbackup/internal/archive"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// FuzzChainMerge: members made of any sequence of groups, messages and
// consent records, in order or not, merge without a panic into a stream in
// export order with no record twice, or fail as ErrChainOrder; each byte
// picks a member (bit 0), a kind (bits 1-2) and a key (bits 3-5).
func FuzzChainMerge(f *testing.F) {
	for _, seed := range [][]byte{{0x00, 0x02, 0x0a, 0x01, 0x03, 0x0b, 0x04, 0x05}, {0x08, 0x00}, {0x02}, {0x04, 0x00}, {0x00, 0x01, 0x12, 0x13, 0x04, 0x0d}} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 64 {
			return
		}
		var members [2][]*ds.BackupElement
		group := [2]string{}
		for _, b := range ops {
			m, key := b&1, int(b>>3&7)
			switch b >> 1 & 3 {
			case 0:
				group[m] = fmt.Sprintf("g%d", key)
				members[m] = append(members[m], groupEl(group[m]))
			case 1:
				if group[m] == "" {
					continue
				}
				msg := storetest.Message(fmt.Sprintf("m%d", key), storetest.GroupID(group[m]), int64(key))
				members[m] = append(members[m], &ds.BackupElement{Element: &ds.BackupElement_GroupMessage{GroupMessage: msg}})
			default:
				c := storetest.Consent(fmt.Sprintf("e%d", key), cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED, 1)
				members[m] = append(members[m], &ds.BackupElement{Element: &ds.BackupElement_Consent{Consent: c}})
			}
		}
		var chain []ChainMember
		for i, els := range members {
			r, err := archive.NewReader(bytes.NewReader(archiveOf(t, append([]*ds.BackupElement{metaEl()}, els...)...)), key, archive.ReaderOptions{})
			if err != nil {
				t.Fatal(err)
			}
			chain = append(chain, ChainMember{Archive: r, ChangeSeq: int64(i)})
		}
		c, err := NewChain(t.Context(), tombstoneFree{}, "owner", chain)
		if errors.Is(err, ErrChainOrder) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		seen := map[string]bool{}
		var last *ds.BackupElement
		for {
			el, err := c.Next()
			if errors.Is(err, io.EOF) {
				return
			}
			if errors.Is(err, ErrChainOrder) {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			k := fmt.Sprint(el.GetGroup().GetId(), el.GetGroupMessage().GetId(), el.GetGroupMessage().GetGroupId(), el.GetConsent().GetEntity())
			if seen[k] {
				t.Fatalf("record %s twice", k)
			}
			seen[k] = true
			if last != nil && last.GetConsent() != nil && el.GetConsent() == nil {
				t.Fatalf("a %T after the consent records", el.GetElement())
			}
			last = el
		}
	})
}

// tombstoneFree is a store that holds no tombstone.
type tombstoneFree struct{ store.Tombstones }

func (tombstoneFree) HasTombstones(context.Context, string, int64, int64) (bool, error) {
	return false, nil
}

func (tombstoneFree) GroupTombstones(context.Context, string, []byte, int64, int64, *store.TombstoneKey, int) ([]store.Tombstone, error) {
	return nil, nil
}
