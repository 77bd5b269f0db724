package jobs

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// TestPlanRetention (issue 36): the dry run reads the schedule as this
// server runs it, takes keep rules of its own (with or without a
// schedule), keeps the bases a kept increment needs, and deletes nothing.
func TestPlanRetention(t *testing.T) {
	st := enginetest.SQLite(t)
	h := newHarness(t, st)
	owner := storetest.Owner("plan")
	fill(t, st, owner, 3)
	// keep: 10 keeps everything as the days pass; full_every 2 makes
	// full, +1, full, +1.
	policy, err := ParseSchedules([]byte(fmt.Sprintf(`
schedules:
  - name: nightly
    cron: "0 3 * * *"
    owners: [%q]
    bucket: local
    keep: 10
    full_every: 2
`, owner)))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := NewScheduler(t.Context(), h.m, policy)
	if err != nil {
		t.Fatal(err)
	}
	day0 := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	var ids []string // oldest first
	for day := range 4 {
		if _, err := st.AppendMessages(t.Context(), owner, storetest.Messages(fmt.Sprintf("d%d-", day), storetest.GroupID("g-one"), 1, int64(10_000+day)), store.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
		started := sc.Fire(t.Context(), policy.Schedules[0], day0.Add(time.Duration(day)*24*time.Hour))
		if len(started) != 1 {
			t.Fatalf("day %d started %d jobs", day, len(started))
		}
		j := waitDone(t, h.m, started[0])
		md, err := Progress(j)
		if j.State != store.JobSucceeded || err != nil {
			t.Fatalf("day %d: %s %s %v", day, j.State, j.ErrorMessage, err)
		}
		ids = append(ids, md.GetBackup())
	}
	// A backup no schedule wrote.
	manual, err := h.m.StartExport(t.Context(), "tester", exportReq(owner, "by hand"))
	if err != nil {
		t.Fatal(err)
	}
	md, _ := Progress(waitDone(t, h.m, manual.ID))
	manualID := md.GetBackup()

	decided := func(p Plan) (keep, remove []string) {
		for _, k := range p.Keep {
			keep = append(keep, k.Backup.ID+":"+fmt.Sprint(k.Rules))
		}
		for _, b := range p.Remove {
			remove = append(remove, b.ID)
		}
		return keep, remove
	}
	// The schedule's own rules keep its four.
	p, err := h.m.Catalog.PlanRetention(t.Context(), owner, "nightly", nil)
	if err != nil || p.Rules != (Retention{Last: 10}) || len(p.Keep) != 4 || len(p.Remove) != 0 {
		t.Fatalf("the schedule's plan: %+v, %v", p, err)
	}
	// last 1 over the schedule: the newest increment and its base stay.
	p, err = h.m.Catalog.PlanRetention(t.Context(), owner, "nightly", &Retention{Last: 1})
	keep, remove := decided(p)
	wantKeep := []string{ids[3] + ":[last]", ids[2] + ":[chain]"}
	if err != nil || !slices.Equal(keep, wantKeep) || !slices.Equal(remove, []string{ids[1], ids[0]}) {
		t.Errorf("last 1 over the schedule: keep %v, remove %v, %v; want keep %v", keep, remove, err, wantKeep)
	}
	// last 1 over every backup of the owner: the manual one is newest.
	p, err = h.m.Catalog.PlanRetention(t.Context(), owner, "", &Retention{Last: 1})
	keep, remove = decided(p)
	if err != nil || !slices.Equal(keep, []string{manualID + ":[last]"}) || len(remove) != 4 {
		t.Errorf("last 1 over every backup: keep %v, remove %v, %v", keep, remove, err)
	}
	// Refusals.
	for name, c := range map[string]struct {
		schedule string
		rules    *Retention
		is       error
	}{
		"no such schedule":   {"weekly", nil, ErrNoSuchSchedule},
		"neither":            {"", nil, ErrInvalid},
		"rules keep nothing": {"", &Retention{}, ErrInvalid},
		"a count below -1":   {"nightly", &Retention{Last: -2}, ErrInvalid},
	} {
		if _, err := h.m.Catalog.PlanRetention(t.Context(), owner, c.schedule, c.rules); !errors.Is(err, c.is) {
			t.Errorf("%s: %v; want %v", name, err, c.is)
		}
	}
	// Another tenant naming this owner's schedule learns nothing: the
	// answer is the unknown schedule's, word for word but the name
	// (issue 47, finding 8: its rules came back, an unknown name was
	// NOT_FOUND, an oracle for other tenants' schedule names).
	other := storetest.Owner("plan-other")
	_, foreign := h.m.Catalog.PlanRetention(t.Context(), other, "nightly", nil)
	_, unknown := h.m.Catalog.PlanRetention(t.Context(), other, "nighty", nil)
	if !errors.Is(foreign, ErrNoSuchSchedule) || strings.Replace(foreign.Error(), "nightly", "nighty", 1) != unknown.Error() {
		t.Errorf("another owner's schedule: %v; an unknown one: %v; want the same answer", foreign, unknown)
	}
	// Nothing was deleted.
	all, err := st.ListBackups(t.Context(), store.BackupQuery{Owner: owner, Limit: 10})
	if err != nil || len(all) != 5 {
		t.Errorf("after the plans: %d backups, %v; want all 5", len(all), err)
	}
}
