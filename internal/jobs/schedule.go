package jobs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"go.uber.org/zap"
	"go.yaml.in/yaml/v3"

	pv "github.com/contentbackup/contentbackup/api/contentbackup/persistence/v1"
	"github.com/contentbackup/contentbackup/internal/records"
	"github.com/contentbackup/contentbackup/internal/store"
)

// Schedule exports listed owners to a bucket on a cron schedule, keeping
// the newest Keep of each owner's backups it wrote (read from the catalog,
// never from a listing of names).
type Schedule struct {
	Name string `yaml:"name"`
	// Cron is a standard five-field expression ("0 3 * * *") or a
	// descriptor (@daily, @every 6h), in UTC.
	Cron   string   `yaml:"cron"`
	Owners []string `yaml:"owners"`
	// KeyRef is no longer used: each backup has its own data key. A
	// policy that still sets it loads, with a warning.
	KeyRef string `yaml:"key_ref"`
	Bucket string `yaml:"bucket"`
	// Prefix starts every object key: <prefix><owner>/<backup id>.xmtpbak.
	Prefix string `yaml:"prefix"`
	// Keep is how many complete backups of each owner this schedule
	// wrote stay; older ones (objects, sidecars and catalog rows) are
	// deleted after each successful export. Retention, instead, keeps them
	// by calendar (restic's rules); a schedule sets one of the two.
	Keep      int        `yaml:"keep"`
	Retention *Retention `yaml:"retention"`
	// Verify, when set, reads the schedule's backups back on a schedule
	// of its own.
	Verify *VerifyPolicy `yaml:"verify"`
	// FullEvery, above 1, makes every FullEvery-th backup of an owner a
	// full one and those between increments, each of the owner's newest
	// backup of the schedule (a chain: full, increment, increment...).
	// 0 or 1: every backup is full. A full is taken instead of an
	// increment whenever the newest backup cannot be built on (written
	// before changes were tracked, or its last verification failed).
	FullEvery int `yaml:"full_every"`

	spec cron.Schedule
	// verifySpec and verifyGrain are Verify.Cron's, as spec and grain.
	verifySpec  cron.Schedule
	verifyGrain time.Duration
	// grain is the time a tick is named by: a minute for a cron
	// expression, the interval for @every.
	grain time.Duration
}

// everyAligned is @every D on a grid shared by every replica: ticks at
// the multiples of D (from the zero time), where cron's own @every counts
// from each process's start, so that two replicas would never name the
// same tick.
type everyAligned struct{ every time.Duration }

func (e everyAligned) Next(t time.Time) time.Time { return t.Truncate(e.every).Add(e.every) }

// alignTicks returns the schedule replicas agree on and the grain its
// ticks are named by.
func alignTicks(spec cron.Schedule) (cron.Schedule, time.Duration) {
	if c, ok := spec.(cron.ConstantDelaySchedule); ok {
		return everyAligned{c.Delay}, c.Delay
	}
	return spec, time.Minute
}

// Tick is the tick of s a firing at "at" runs: the scheduled time,
// whatever the firing replica's lateness within the grain.
func (s *Schedule) Tick(at time.Time) time.Time { return at.UTC().Truncate(s.grain) }

// missedBetween counts the ticks of s strictly between two claimed ticks:
// those no replica ran (every replica down, or the store unreachable).
func (s *Schedule) missedBetween(prev, tick time.Time) int {
	n := 0
	for t := s.spec.Next(prev); t.Before(tick) && n < 100_000; t = s.spec.Next(t) {
		n++
	}
	return n
}

// SchedulePolicy is the --schedule file.
type SchedulePolicy struct {
	Schedules []*Schedule `yaml:"schedules"`
}

// ArchiveSuffix ends every scheduled archive's key.
const ArchiveSuffix = ".xmtpbak"

// LoadSchedules reads and checks a schedule policy file.
func LoadSchedules(path string) (*SchedulePolicy, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("schedule policy: %w", err)
	}
	return ParseSchedules(b)
}

// ParseSchedules parses and checks a schedule policy: every field known,
// every schedule complete.
func ParseSchedules(b []byte) (*SchedulePolicy, error) {
	var p SchedulePolicy
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&p); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("schedule policy: %w", err)
	}
	seen := map[string]bool{}
	for i, s := range p.Schedules {
		at := fmt.Sprintf("schedule policy: schedules[%d]", i)
		if !keyName.MatchString(s.Name) {
			return nil, fmt.Errorf("%s.name %.64q: 1-64 letters, digits, '.', '_' or '-'", at, s.Name)
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("%s: name %q used twice", at, s.Name)
		}
		seen[s.Name] = true
		spec, err := cron.ParseStandard(s.Cron)
		if err != nil {
			return nil, fmt.Errorf("%s.cron: %w", at, err)
		}
		s.spec, s.grain = alignTicks(spec)
		if len(s.Owners) == 0 {
			return nil, fmt.Errorf("%s.owners: none", at)
		}
		for j, o := range s.Owners {
			if err := records.CheckOwner(o); err != nil {
				return nil, fmt.Errorf("%s.owners[%d]: %w", at, j, err)
			}
		}
		if s.Bucket == "" {
			return nil, fmt.Errorf("%s.bucket: empty", at)
		}
		if s.Prefix != "" && !strings.HasSuffix(s.Prefix, "/") {
			return nil, fmt.Errorf("%s.prefix %.64q: must end with /", at, s.Prefix)
		}
		if err := CheckObjectKey(s.Prefix + "x"); s.Prefix != "" && err != nil {
			return nil, fmt.Errorf("%s.prefix: %w", at, err)
		}
		if s.Verify != nil {
			vspec, err := cron.ParseStandard(s.Verify.Cron)
			if err != nil {
				return nil, fmt.Errorf("%s.verify.cron: %w", at, err)
			}
			s.verifySpec, s.verifyGrain = alignTicks(vspec)
			if s.Verify.Sample < 0 {
				return nil, fmt.Errorf("%s.verify.sample: %d; 0 (all) or more", at, s.Verify.Sample)
			}
		}
		if s.FullEvery < 0 {
			return nil, fmt.Errorf("%s.full_every: %d; 0 (every backup full) or more", at, s.FullEvery)
		}
		switch {
		case s.Retention != nil && s.Keep != 0:
			return nil, fmt.Errorf("%s: keep and retention both set; keep n is retention {last: n}: choose one", at)
		case s.Retention != nil:
			if err := s.Retention.check(); err != nil {
				return nil, fmt.Errorf("%s.retention: %w", at, err)
			}
		case s.Keep < 1:
			return nil, fmt.Errorf("%s.keep: %d; keep at least 1 archive", at, s.Keep)
		}
	}
	return &p, nil
}

// ownerDir is the owner's folder under a schedule's prefix: the owner
// escaped, so no owner can name another folder or a "." segment.
func ownerDir(prefix, owner string) string {
	esc := url.PathEscape(owner)
	if strings.HasPrefix(esc, ".") {
		esc = "%2E" + esc[1:]
	}
	return prefix + esc + "/"
}

// ObjectKey is where a scheduled export of owner at t goes.
func (s *Schedule) ObjectKey(owner string, t time.Time) string {
	return ownerDir(s.Prefix, owner) + t.UTC().Format("20060102T150405.000000000Z") + ArchiveSuffix
}

// Scheduler fires a policy's schedules.
type Scheduler struct {
	m      *Manager
	policy *SchedulePolicy
	cron   *cron.Cron
	log    *zap.Logger
}

// NewScheduler checks that every schedule's bucket exists and returns a
// scheduler for them; Start starts it.
func NewScheduler(ctx context.Context, m *Manager, p *SchedulePolicy) (*Scheduler, error) {
	sc := &Scheduler{m: m, policy: p, log: m.cfg.Log.Named("schedule")}
	for _, s := range p.Schedules {
		if _, err := m.cfg.Buckets.Open(ctx, s.Bucket); err != nil {
			return nil, fmt.Errorf("schedule %s: %w", s.Name, err)
		}
		if s.KeyRef != "" {
			sc.log.Warn("key_ref is ignored: each backup is sealed with its own data key (GetBackupKey returns it)", zap.String("schedule", s.Name))
		}
	}
	sc.announce(ctx)
	m.Catalog.schedules.Store(p)
	c := cron.New(cron.WithLocation(time.UTC))
	sc.cron = c
	for _, s := range p.Schedules {
		c.Schedule(s.spec, cron.FuncJob(func() { sc.Fire(m.Runner.ctx, s, m.cfg.ScheduleClock()) }))
		if s.Verify != nil {
			c.Schedule(s.verifySpec, cron.FuncJob(func() { sc.FireVerify(m.Runner.ctx, s, m.cfg.ScheduleClock()) }))
		}
	}
	return sc, nil
}

// announce tells Freshness each schedule's interval and, from the
// catalog, each owner's newest complete backup by it.
func (sc *Scheduler) announce(ctx context.Context) {
	f := sc.m.cfg.Freshness
	for _, s := range sc.policy.Schedules {
		if f.ScheduleInterval != nil {
			next := s.spec.Next(time.Now())
			f.ScheduleInterval(s.Name, s.spec.Next(next).Sub(next))
		}
		if f.BackupSucceeded == nil {
			continue
		}
		for _, owner := range s.Owners {
			newest, err := sc.m.cfg.Store.ListBackups(ctx, store.BackupQuery{Owner: owner, Schedule: s.Name, State: store.BackupComplete, Limit: 1})
			if err != nil {
				sc.log.Warn("newest backup not read", zap.String("schedule", s.Name), zap.String("owner", owner), zap.Error(err))
				continue
			}
			if len(newest) == 1 {
				f.BackupSucceeded(s.Name, owner, newest[0].Completed)
			}
		}
	}
}

// Start starts firing.
func (sc *Scheduler) Start() { sc.cron.Start() }

// Stop stops firing; jobs already started run on.
func (sc *Scheduler) Stop() { <-sc.cron.Stop().Done() }

// Fire starts one export job per owner of s for the tick "at" falls in;
// each that succeeds prunes that owner's backups of s to s.Keep (in the
// job's own goroutine, so a shutdown waits for it). Every replica of a
// fleet fires every tick: each claims (owner, schedule, tick) in the
// store first, and only the replica whose claim wins exports, so a tick
// runs once however many replicas fire it and however their clocks
// disagree within the tick's grain. Ticks no replica claimed before this
// one are counted as missed (ScheduleMissed). A job that finds no free
// slot waits in its owner's queue; an owner whose export is already
// running, or whose queue is full, is skipped until the next firing, and
// counted so (ScheduleRun).
func (sc *Scheduler) Fire(ctx context.Context, s *Schedule, at time.Time) []string {
	var ids []string
	tick := s.Tick(at)
	for _, owner := range s.Owners {
		if sc.erased(ctx, s, owner) {
			continue
		}
		won, prev, err := sc.m.cfg.Store.ClaimScheduleTick(ctx, owner, s.Name, tick, sc.m.cfg.Replica)
		if err != nil {
			sc.m.scheduleRun(s.Name, "skipped")
			sc.log.Warn("scheduled export not started: the tick could not be claimed", zap.String("schedule", s.Name), zap.String("owner", owner), zap.Error(err))
			continue
		}
		if !won {
			sc.m.scheduleRun(s.Name, "claimed_elsewhere")
			continue
		}
		if !prev.IsZero() {
			if n := s.missedBetween(prev, tick); n > 0 {
				sc.log.Warn("schedule ticks missed: no replica ran them", zap.String("schedule", s.Name), zap.String("owner", owner), zap.Int("missed", n))
				if sc.m.cfg.ScheduleMissed != nil {
					sc.m.cfg.ScheduleMissed(s.Name, n)
				}
			}
		}
		req := ExportRequest{Owner: owner, Bucket: s.Bucket, Label: s.Name + " " + at.UTC().Format(time.RFC3339)}
		since, err := sc.m.Catalog.nextBase(ctx, s, owner)
		if err != nil {
			// A full backup is never wrong: take one.
			sc.log.Warn("schedule's chain unreadable: taking a full backup", zap.String("schedule", s.Name), zap.String("owner", owner), zap.Error(err))
		}
		req.Since = since
		j, err := sc.m.exports.start(ctx, "schedule:"+s.Name, req, s)
		if err != nil {
			sc.m.scheduleRun(s.Name, "skipped")
			level := sc.log.Warn
			if errors.Is(err, store.ErrJobConflict) {
				level = sc.log.Info
			}
			level("scheduled export not started", zap.String("schedule", s.Name), zap.String("owner", owner), zap.Error(err))
			continue
		}
		outcome := "started"
		if md, err := Progress(j); err == nil && md.GetPhase() == pv.JobPhase_JOB_PHASE_QUEUED {
			outcome = "queued"
		}
		sc.m.scheduleRun(s.Name, outcome)
		ids = append(ids, j.ID)
	}
	return ids
}

// FireVerify reads back, for each owner of s, Verify.Sample of the
// backups s wrote (those verified longest ago first). Like an export's,
// each owner's verification of a tick is claimed in the store first, so
// a fleet verifies once per tick.
func (sc *Scheduler) FireVerify(ctx context.Context, s *Schedule, at time.Time) (read, failed int) {
	tick := at.UTC().Truncate(s.verifyGrain)
	for _, owner := range s.Owners {
		if sc.erased(ctx, s, owner) {
			continue
		}
		won, _, err := sc.m.cfg.Store.ClaimScheduleTick(ctx, owner, s.Name+"/verify", tick, sc.m.cfg.Replica)
		if err != nil || !won {
			if err != nil {
				sc.log.Warn("verification not run: the tick could not be claimed", zap.String("schedule", s.Name), zap.String("owner", owner), zap.Error(err))
			}
			continue
		}
		r, f, err := sc.m.Verifier.VerifyOwner(ctx, s.Name, owner, s.Verify.Sample)
		read, failed = read+r, failed+f
		if err != nil {
			sc.log.Warn("verification incomplete", zap.String("schedule", s.Name), zap.String("owner", owner), zap.Error(err))
		}
	}
	sc.log.Info("backups verified", zap.String("schedule", s.Name), zap.Int("read", read), zap.Int("failed", failed))
	return read, failed
}

// erased reports an owner of s that was erased and not re-enabled, which
// the schedule skips (counted "erased", and logged at every tick so the
// policy is fixed): a device still writing under an erased name must not
// start new backups of a person who asked to be erased (issue 46, finding
// 6). A record that cannot be read skips the owner too: a backup taken
// against an erasure cannot be taken back.
func (sc *Scheduler) erased(ctx context.Context, s *Schedule, owner string) bool {
	e, err := sc.m.cfg.Store.OwnerErased(ctx, owner)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return false
	case err != nil:
		sc.m.scheduleRun(s.Name, "skipped")
		sc.log.Warn("scheduled export not started: the owner's erasure record could not be read", zap.String("schedule", s.Name), zap.String("owner", owner), zap.Error(err))
		return true
	case !e.Blocked():
		return false
	}
	sc.m.scheduleRun(s.Name, "erased")
	sc.log.Warn("scheduled export skipped: the owner was erased; remove it from the schedule, or re-enable the name (archivectl owners reenable) once it belongs to someone else",
		zap.String("schedule", s.Name), zap.String("owner", owner), zap.String("erasure", e.Job))
	return true
}

func (m *Manager) scheduleRun(schedule, outcome string) {
	if m.cfg.ScheduleRun != nil {
		m.cfg.ScheduleRun(schedule, outcome)
	}
}

// Policy is the schedule's retention: its calendar rules, or keep-last
// Keep.
func (s *Schedule) Policy() Retention {
	if s.Retention != nil {
		return *s.Retention
	}
	return Retention{Last: s.Keep}
}

// nextBase is what s's next backup of owner builds on: "" for a full
// backup, or the id of the owner's newest backup of s when s.FullEvery
// leaves room in its chain for another increment.
func (cat *Catalog) nextBase(ctx context.Context, s *Schedule, owner string) (string, error) {
	if s.FullEvery <= 1 {
		return "", nil
	}
	page, err := cat.cfg.Store.ListBackups(ctx, store.BackupQuery{Owner: owner, Schedule: s.Name, State: store.BackupComplete, Limit: s.FullEvery})
	if err != nil || len(page) == 0 {
		return "", err
	}
	newest := page[0]
	if newest.Summary.ChangeSeq < 0 || newest.VerifyProblem != "" {
		return "", nil
	}
	// A replace since the newest: its chain cannot go on.
	if floor, err := cat.cfg.Store.BaseFloor(ctx, owner); err != nil || newest.Summary.ChangeSeq < floor {
		return "", err
	}
	// The chain's length so far: the newest and the increments below it,
	// down to its full, among the schedule's last FullEvery backups.
	byID := make(map[string]store.Backup, len(page))
	for _, b := range page {
		byID[b.ID] = b
	}
	length := 1
	for b := newest; b.Base != ""; length++ {
		base, ok := byID[b.Base]
		if !ok {
			// The full lies further back than FullEvery backups.
			return "", nil
		}
		b = base
	}
	if length >= s.FullEvery {
		return "", nil
	}
	return newest.ID, nil
}

// Prune deletes the owner's complete backups that s wrote and its
// retention does not keep, as the catalog lists them: an object in the
// prefix that the catalog does not hold (another writer's, or one left by
// hand) is never counted nor deleted.
func (cat *Catalog) Prune(ctx context.Context, s *Schedule, owner string) error {
	complete, err := cat.completeBackups(ctx, owner, s.Name, 0)
	if err != nil {
		return err
	}
	held, err := cat.heldTest(ctx, owner)
	if err != nil {
		return err
	}
	_, remove := s.Policy().ApplyHolding(complete, held)
	for _, b := range remove {
		err := cat.deleteBackup(ctx, b)
		if errors.Is(err, store.ErrHeld) {
			// Held since the holds were read: the store refused the delete.
			cat.cfg.Log.Info("backup kept by a legal hold", zap.String("schedule", s.Name), zap.String("owner", owner), zap.String("backup", b.ID))
			continue
		}
		if err != nil {
			return err
		}
		cat.cfg.Log.Info("backup deleted by retention", zap.String("schedule", s.Name), zap.String("owner", owner), zap.String("backup", b.ID), zap.String("key", b.ObjectKey))
	}
	return nil
}
