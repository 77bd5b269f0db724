package backup

import (
	"context"
	"errors"
	"sync"

	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/store"
)

// planner is the store as an import's dry run sees it (ImportOptions.
// ValidateOnly, AIP-163): reads go to the store, and each write the
// import would make is answered by the store's own merge rules, applied
// to what the store holds and what the dry run would have written before
// it, and written nowhere.
type planner struct {
	store.Store
	mu sync.Mutex
	// groups is each group met so far as the import would leave it: its
	// last_message_ns, and whether the store has it (else the import
	// would create it).
	groups map[string]plannedGroup
	// msgs are the message ids the dry run would have inserted.
	msgs map[string]bool
	// consent is each key met so far: its consented_at_ns as the import
	// would leave it.
	consent map[store.ConsentKey]int64
}

type plannedGroup struct {
	last   *int64
	stored bool
}

func newPlanner(st store.Store) *planner {
	return &planner{Store: st, groups: map[string]plannedGroup{}, msgs: map[string]bool{}, consent: map[store.ConsentKey]int64{}}
}

// MergeGroups answers as store.Groups.MergeGroups: a new id Inserted, a
// known one Updated when the archive's last_message_ns is later
// (ARCH-014), Unchanged otherwise.
func (p *planner) MergeGroups(ctx context.Context, owner string, groups []*gb.GroupSave) ([]store.Outcome, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]store.Outcome, len(groups))
	for i, g := range groups {
		known, ok := p.groups[string(g.GetId())]
		if !ok {
			stored, err := p.Store.GetGroup(ctx, owner, g.GetId())
			switch {
			case errors.Is(err, store.ErrNotFound):
				p.groups[string(g.GetId())] = plannedGroup{last: g.LastMessageNs}
				out[i] = store.Inserted
				continue
			case err != nil:
				return nil, err
			}
			known = plannedGroup{last: stored.LastMessageNs, stored: true}
		}
		if store.Later(g.LastMessageNs, known.last) {
			known.last = g.LastMessageNs
			out[i] = store.Updated
		} else {
			out[i] = store.Unchanged
		}
		p.groups[string(g.GetId())] = known
	}
	return out, nil
}

// GetGroup finds a group the dry run would have created as well as a
// stored one.
func (p *planner) GetGroup(ctx context.Context, owner string, id []byte) (*gb.GroupSave, error) {
	p.mu.Lock()
	known, ok := p.groups[string(id)]
	p.mu.Unlock()
	if ok && !known.stored {
		return &gb.GroupSave{Id: id, LastMessageNs: known.last}, nil
	}
	return p.Store.GetGroup(ctx, owner, id)
}

// AppendMessages answers as an import's append: a stored id, or one the
// dry run already took, Unchanged (ARCH-013); any other Inserted.
func (p *planner) AppendMessages(ctx context.Context, owner string, msgs []*mb.GroupMessageSave, _ store.AppendOptions) ([]store.Outcome, error) {
	ids := make([][]byte, len(msgs))
	for i, m := range msgs {
		ids[i] = m.GetId()
	}
	exist, err := p.Store.MessagesExist(ctx, owner, ids)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]store.Outcome, len(msgs))
	for i, m := range msgs {
		if exist[i] || p.msgs[string(m.GetId())] {
			out[i] = store.Unchanged
			continue
		}
		p.msgs[string(m.GetId())] = true
		out[i] = store.Inserted
	}
	return out, nil
}

// MergeConsent answers as store.Consent.MergeConsent: a record replaces
// the one for its key only when its consented_at_ns is later (CONS-010).
func (p *planner) MergeConsent(ctx context.Context, owner string, records []*cs.ConsentSave) ([]store.Outcome, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]store.Outcome, len(records))
	for i, r := range records {
		key := store.ConsentKey{EntityType: r.GetEntityType(), Entity: r.GetEntity()}
		at, ok := p.consent[key]
		if !ok {
			stored, err := p.Store.GetConsent(ctx, owner, key)
			switch {
			case errors.Is(err, store.ErrNotFound):
				p.consent[key] = r.GetConsentedAtNs()
				out[i] = store.Inserted
				continue
			case err != nil:
				return nil, err
			}
			at = stored.GetConsentedAtNs()
		}
		if r.GetConsentedAtNs() > at {
			p.consent[key] = r.GetConsentedAtNs()
			out[i] = store.Updated
		} else {
			p.consent[key] = at
			out[i] = store.Unchanged
		}
	}
	return out, nil
}
