package jobs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"go.uber.org/zap"
	"go.yaml.in/yaml/v3"
	"gocloud.dev/blob"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/records"
	"github.com/contentbackup/contentbackup/internal/store"
)

// Schedule exports listed owners to a bucket on a cron schedule, keeping
// the newest Keep archives of each owner.
type Schedule struct {
	Name string `yaml:"name"`
	// Cron is a standard five-field expression ("0 3 * * *") or a
	// descriptor (@daily, @every 6h), in UTC.
	Cron   string   `yaml:"cron"`
	Owners []string `yaml:"owners"`
	KeyRef string   `yaml:"key_ref"`
	Bucket string   `yaml:"bucket"`
	// Prefix starts every object key: <prefix><owner>/<time>.xmtpbak.
	Prefix string `yaml:"prefix"`
	// Keep is how many complete archives of each owner stay; older ones
	// (and their sidecars) are deleted after each successful export.
	Keep int `yaml:"keep"`

	spec cron.Schedule
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
		s.spec = spec
		if len(s.Owners) == 0 {
			return nil, fmt.Errorf("%s.owners: none", at)
		}
		for j, o := range s.Owners {
			if err := records.CheckOwner(o); err != nil {
				return nil, fmt.Errorf("%s.owners[%d]: %w", at, j, err)
			}
		}
		if err := CheckKeyRef(s.KeyRef); err != nil {
			return nil, fmt.Errorf("%s: %w", at, err)
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
		if s.Keep < 1 {
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

// NewScheduler checks that every schedule's key and bucket exist and
// returns a scheduler for them; Start starts it.
func NewScheduler(ctx context.Context, m *Manager, p *SchedulePolicy) (*Scheduler, error) {
	for _, s := range p.Schedules {
		if _, err := m.cfg.Keys.Key(ctx, s.KeyRef); err != nil {
			return nil, fmt.Errorf("schedule %s: %w", s.Name, err)
		}
		if _, err := m.cfg.Buckets.Open(ctx, s.Bucket); err != nil {
			return nil, fmt.Errorf("schedule %s: %w", s.Name, err)
		}
	}
	c := cron.New(cron.WithLocation(time.UTC))
	sc := &Scheduler{m: m, policy: p, cron: c, log: m.cfg.Log.Named("schedule")}
	for _, s := range p.Schedules {
		c.Schedule(s.spec, cron.FuncJob(func() { sc.Fire(m.ctx, s, time.Now()) }))
	}
	return sc, nil
}

// Start starts firing.
func (sc *Scheduler) Start() { sc.cron.Start() }

// Stop stops firing; jobs already started run on.
func (sc *Scheduler) Stop() { <-sc.cron.Stop().Done() }

// Fire starts one export job per owner of s and, as each succeeds, prunes
// that owner's archives to s.Keep (in the job's own goroutine, so a
// shutdown waits for it). An owner whose export is already
// running (here or on another replica) is skipped until the next firing.
func (sc *Scheduler) Fire(ctx context.Context, s *Schedule, at time.Time) []string {
	var ids []string
	for _, owner := range s.Owners {
		req := &cb.StartExportRequest{Owner: owner, KeyRef: s.KeyRef,
			Destination: &cb.ObjectLocation{Bucket: s.Bucket, Key: s.ObjectKey(owner, at)}}
		j, err := sc.m.startExport(ctx, "schedule:"+s.Name, req, func(ctx context.Context) {
			if err := sc.Prune(ctx, s, owner); err != nil {
				sc.log.Warn("retention", zap.String("schedule", s.Name), zap.String("owner", owner), zap.Error(err))
			}
		})
		if err != nil {
			level := sc.log.Warn
			if errors.Is(err, store.ErrJobConflict) {
				level = sc.log.Info
			}
			level("scheduled export not started", zap.String("schedule", s.Name), zap.String("owner", owner), zap.Error(err))
			continue
		}
		ids = append(ids, j.ID)
	}
	return ids
}

// Prune deletes the owner's oldest complete archives under s past s.Keep,
// with their sidecars. An archive without its sidecar is not counted and
// not deleted: it is not known to be complete, and may be an export still
// committing.
func (sc *Scheduler) Prune(ctx context.Context, s *Schedule, owner string) error {
	bucket, err := sc.m.cfg.Buckets.Open(ctx, s.Bucket)
	if err != nil {
		return err
	}
	keys := map[string]bool{}
	it := bucket.List(&blob.ListOptions{Prefix: ownerDir(s.Prefix, owner)})
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("list archives: %w", err)
		}
		keys[obj.Key] = true
	}
	var complete []string
	for k := range keys {
		if strings.HasSuffix(k, ArchiveSuffix) && keys[k+SidecarSuffix] {
			complete = append(complete, k)
		}
	}
	sort.Strings(complete) // the time in the name sorts oldest first
	for _, k := range complete[:max(len(complete)-s.Keep, 0)] {
		// The sidecar first: an archive without one no longer counts.
		if err := bucket.Delete(ctx, k+SidecarSuffix); err != nil {
			return fmt.Errorf("delete sidecar: %w", err)
		}
		if err := bucket.Delete(ctx, k); err != nil {
			return fmt.Errorf("delete archive: %w", err)
		}
		sc.log.Info("archive deleted by retention", zap.String("schedule", s.Name), zap.String("key", k))
	}
	return nil
}
