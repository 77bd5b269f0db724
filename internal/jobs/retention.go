package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/contentbackup/contentbackup/internal/records"
	"github.com/contentbackup/contentbackup/internal/store"
)

// Retention is a schedule's calendar retention, restic's `forget
// --keep-*` rules over the catalog: Last keeps the newest n backups, Daily
// the newest backup of each of the last n days that have one, Weekly of n
// ISO weeks, Monthly of n months, Yearly of n years; -1 keeps one of every
// such period. Periods are read in UTC. A backup any rule keeps stays.
// While a rule still has periods to fill when it reaches the oldest
// backup, that backup is kept too, as restic keeps it, so the history
// kept reaches as far back as it can.
type Retention struct {
	Last    int `yaml:"last"`
	Daily   int `yaml:"daily"`
	Weekly  int `yaml:"weekly"`
	Monthly int `yaml:"monthly"`
	Yearly  int `yaml:"yearly"`
}

// check refuses a count below -1 and a retention that keeps nothing.
func (r Retention) check() error {
	counts := []int{r.Last, r.Daily, r.Weekly, r.Monthly, r.Yearly}
	for _, n := range counts {
		if n < -1 {
			return fmt.Errorf("%d: a count is -1 (every period) or more", n)
		}
	}
	if !slices.ContainsFunc(counts, func(n int) bool { return n != 0 }) {
		return errors.New("keeps nothing: set at least one of last, daily, weekly, monthly, yearly")
	}
	return nil
}

// Kept is one backup a retention keeps, with the rules that keep it.
type Kept struct {
	Backup store.Backup
	Rules  []string
}

// Apply splits backups, in any order, into those r keeps (newest first,
// each with why) and those it removes (newest first). A backup's time is
// when its export started (Created).
func (r Retention) Apply(backups []store.Backup) (keep []Kept, remove []store.Backup) {
	return r.ApplyHolding(backups, nil)
}

// ApplyHolding is Apply with legal holds: a backup held reports true is
// kept (rule "hold"), and so is the chain it is built on.
func (r Retention) ApplyHolding(backups []store.Backup, held func(store.Backup) bool) (keep []Kept, remove []store.Backup) {
	list := slices.Clone(backups)
	slices.SortStableFunc(list, func(a, b store.Backup) int { return b.Created.Compare(a.Created) })
	rules := []struct {
		name   string
		count  int
		period func(t time.Time, nr int) int
		last   int
	}{
		{"last", r.Last, func(_ time.Time, nr int) int { return nr }, -1},
		{"daily", r.Daily, func(t time.Time, _ int) int { return t.Year()*10000 + int(t.Month())*100 + t.Day() }, -1},
		{"weekly", r.Weekly, func(t time.Time, _ int) int { y, w := t.ISOWeek(); return y*100 + w }, -1},
		{"monthly", r.Monthly, func(t time.Time, _ int) int { return t.Year()*100 + int(t.Month()) }, -1},
		{"yearly", r.Yearly, func(t time.Time, _ int) int { return t.Year() }, -1},
	}
	for nr, b := range list {
		t := b.Created.UTC()
		var why []string
		for i := range rules {
			rule := &rules[i]
			if rule.count == 0 {
				continue
			}
			if p := rule.period(t, nr); p != rule.last || nr == len(list)-1 {
				rule.last = p
				if rule.count > 0 {
					rule.count--
				}
				why = append(why, rule.name)
			}
		}
		if held != nil && held(b) {
			why = append(why, "hold")
		}
		if len(why) > 0 {
			keep = append(keep, Kept{Backup: b, Rules: why})
		} else {
			remove = append(remove, b)
		}
	}
	return keepChains(list, keep, remove)
}

// keepChains moves every base a kept increment is built on, directly or
// through other increments, from remove to keep (rule "chain"): an
// increment restores only after its base, so retention never breaks a
// chain it keeps any part of. list is every backup, newest first.
func keepChains(list []store.Backup, keep []Kept, remove []store.Backup) ([]Kept, []store.Backup) {
	byID := make(map[string]store.Backup, len(list))
	for _, b := range list {
		byID[b.ID] = b
	}
	why := make(map[string][]string, len(list))
	for _, k := range keep {
		why[k.Backup.ID] = k.Rules
	}
	for _, k := range keep {
		for base := k.Backup.Base; base != ""; base = byID[base].Base {
			if _, ok := byID[base]; !ok {
				break // not this schedule's, or gone: nothing here to keep
			}
			if _, kept := why[base]; kept {
				break // its own chain is walked from it
			}
			why[base] = []string{"chain"}
		}
	}
	if len(why) == len(keep) {
		return keep, remove
	}
	keep, remove = keep[:0], remove[:0]
	for _, b := range list {
		if rules, ok := why[b.ID]; ok {
			keep = append(keep, Kept{Backup: b, Rules: rules})
		} else {
			remove = append(remove, b)
		}
	}
	return keep, remove
}

// MaxPlanBackups bounds the backups a retention plan weighs.
const MaxPlanBackups = 10_000

// Plan is a retention's dry run for one owner: what it keeps (newest
// first, each with why) and what its next run deletes.
type Plan struct {
	Rules  Retention
	Keep   []Kept
	Remove []store.Backup
}

// PlanRetention is the dry run of a retention for owner: the schedule's
// as this server runs it (over that schedule's complete backups), or the
// rules given (replacing the schedule's, or, without a schedule, over
// every complete backup of the owner). It deletes nothing.
func (cat *Catalog) PlanRetention(ctx context.Context, owner, schedule string, rules *Retention) (Plan, error) {
	if err := records.CheckOwner(owner); err != nil {
		return Plan{}, invalid(err)
	}
	if rules != nil {
		if err := rules.check(); err != nil {
			return Plan{}, invalid(fmt.Errorf("rules: %w", err))
		}
	}
	var plan Plan
	switch {
	case schedule != "":
		// A schedule that neither covers the owner nor wrote any of its
		// backups answers as an unknown one: its rules and its name are
		// no other tenant's to learn.
		s := cat.schedule(schedule)
		if s != nil && !slices.Contains(s.Owners, owner) {
			if written, err := cat.cfg.Store.ListBackups(ctx, store.BackupQuery{Owner: owner, Schedule: schedule, State: store.BackupComplete, Limit: 1}); err != nil {
				return Plan{}, err
			} else if len(written) == 0 {
				s = nil
			}
		}
		if s == nil {
			return Plan{}, fmt.Errorf("schedule %.64q: %w", schedule, ErrNoSuchSchedule)
		}
		plan.Rules = s.Policy()
	case rules == nil:
		return Plan{}, invalid(errors.New("rules: required without a schedule"))
	}
	if rules != nil {
		plan.Rules = *rules
	}
	backups, err := cat.completeBackups(ctx, owner, schedule, MaxPlanBackups)
	if err != nil {
		return Plan{}, err
	}
	held, err := cat.heldTest(ctx, owner)
	if err != nil {
		return Plan{}, err
	}
	plan.Keep, plan.Remove = plan.Rules.ApplyHolding(backups, held)
	return plan, nil
}

// schedule is the named schedule of the policy this server runs, or nil.
func (cat *Catalog) schedule(name string) *Schedule {
	p := cat.schedules.Load()
	if p == nil {
		return nil
	}
	for _, s := range p.Schedules {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// completeBackups is every complete backup of owner, of one schedule when
// schedule is set, newest first, read from the catalog a page at a time;
// more than limit (when not 0) is ErrPlanTooLarge.
func (cat *Catalog) completeBackups(ctx context.Context, owner, schedule string, limit int) ([]store.Backup, error) {
	var all []store.Backup
	before := ""
	for {
		page, err := cat.cfg.Store.ListBackups(ctx, store.BackupQuery{Owner: owner, Schedule: schedule, State: store.BackupComplete, Before: before, Limit: 500})
		if err != nil {
			return nil, fmt.Errorf("list backups: %w", err)
		}
		all = append(all, page...)
		if limit > 0 && len(all) > limit {
			return nil, fmt.Errorf("more than %d: %w", limit, ErrPlanTooLarge)
		}
		if len(page) < 500 {
			return all, nil
		}
		before = page[len(page)-1].ID
	}
}
