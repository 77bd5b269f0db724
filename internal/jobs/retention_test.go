package jobs

import (
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/contentbackup/contentbackup/internal/store"
)

// simulatedYear is a year of a daily schedule's backups as it really
// runs: 03:00 give or take a few hours, a day missed now and then, and a
// second (manual) backup on some days.
func simulatedYear() []time.Time {
	var out []time.Time
	start := time.Date(2025, 1, 1, 3, 0, 0, 0, time.UTC)
	for day := range 365 {
		if day%17 == 5 {
			continue
		}
		d := start.AddDate(0, 0, day)
		out = append(out, d.Add(time.Duration(day%5)*time.Hour))
		if day%11 == 0 {
			out = append(out, d.Add(12*time.Hour))
		}
	}
	return out
}

// retentionCases are the rule sets held against restic's forget.
var retentionCases = []struct {
	name string
	r    Retention
}{
	{"restic's README: 7 daily, 4 weekly, 12 monthly", Retention{Daily: 7, Weekly: 4, Monthly: 12}},
	{"last 3, daily 10, weekly 8, monthly 6, yearly 2", Retention{Last: 3, Daily: 10, Weekly: 8, Monthly: 6, Yearly: 2}},
	{"every month, 3 weeks", Retention{Monthly: -1, Weekly: 3}},
	{"more days than backups", Retention{Daily: 400}},
	{"last 5", Retention{Last: 5}},
}

const resticGolden = "testdata/restic_forget.json"

var updateRestic = flag.Bool("update-restic", false, "rewrite "+resticGolden+" from the restic binary in RESTIC_BIN")

// TestRetentionKeepsResticsSet: over a simulated year of backups, each
// rule set keeps exactly the backups restic's `forget --keep-*` keeps for
// the same snapshots (testdata/restic_forget.json, written by restic
// itself: make retention-golden).
func TestRetentionKeepsResticsSet(t *testing.T) {
	if *updateRestic {
		writeResticGolden(t)
	}
	golden := resticSets(t)
	var backups []store.Backup
	for i, at := range simulatedYear() {
		backups = append(backups, store.Backup{ID: fmt.Sprintf("%04d", i), Created: at})
	}
	for _, c := range retentionCases {
		want, ok := golden[c.name]
		if !ok {
			t.Errorf("%s: not in %s; run make retention-golden", c.name, resticGolden)
			continue
		}
		keep, remove := c.r.Apply(backups)
		var got []string
		for _, k := range keep {
			got = append(got, k.Backup.Created.UTC().Format(time.RFC3339))
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: kept %d, restic keeps %d\n got %v\nwant %v", c.name, len(got), len(want), got, want)
		}
		if len(keep)+len(remove) != len(backups) {
			t.Errorf("%s: %d kept + %d removed of %d", c.name, len(keep), len(remove), len(backups))
		}
	}
}

// writeResticGolden makes a restic repository holding a snapshot at each
// time of the simulated year and records, for each rule set, the times
// of the snapshots `restic forget --dry-run` keeps.
func writeResticGolden(t *testing.T) {
	bin := os.Getenv("RESTIC_BIN")
	if bin == "" {
		t.Fatal("RESTIC_BIN names the restic binary the golden file is written from")
	}
	// RESTIC_GOLDEN_REPO keeps the repository between runs: its year of
	// snapshots takes restic minutes to write.
	repo, data := os.Getenv("RESTIC_GOLDEN_REPO"), t.TempDir()
	if repo == "" {
		repo = t.TempDir()
	}
	if err := os.WriteFile(filepath.Join(data, "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) []byte {
		cmd := exec.Command(bin, append([]string{"--repo", repo, "--no-cache", "--quiet"}, args...)...)
		cmd.Env = append(os.Environ(), "RESTIC_PASSWORD=golden", "TZ=UTC")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("restic %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
		}
		return out
	}
	if _, err := os.Stat(filepath.Join(repo, "config")); err != nil {
		run("init")
		for _, at := range simulatedYear() {
			run("backup", "--host", "h", "--time", at.UTC().Format("2006-01-02 15:04:05"), data)
		}
	}
	golden := map[string][]string{}
	for _, c := range retentionCases {
		args := []string{"forget", "--dry-run", "--json"}
		for _, f := range []struct {
			flag string
			n    int
		}{{"--keep-last", c.r.Last}, {"--keep-daily", c.r.Daily}, {"--keep-weekly", c.r.Weekly}, {"--keep-monthly", c.r.Monthly}, {"--keep-yearly", c.r.Yearly}} {
			switch {
			case f.n == -1:
				args = append(args, f.flag+"=unlimited")
			case f.n != 0:
				args = append(args, fmt.Sprintf("%s=%d", f.flag, f.n))
			}
		}
		var groups []struct {
			Keep []struct {
				Time time.Time `json:"time"`
			} `json:"keep"`
		}
		if err := json.Unmarshal(run(args...), &groups); err != nil {
			t.Fatal(err)
		}
		var kept []string
		for _, g := range groups {
			for _, s := range g.Keep {
				kept = append(kept, s.Time.UTC().Format(time.RFC3339))
			}
		}
		golden[c.name] = kept
	}
	out, err := json.MarshalIndent(golden, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(resticGolden, append(out, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRetentionRefusesNothingKept(t *testing.T) {
	for _, r := range []Retention{{}, {Daily: -2}} {
		if r.check() == nil {
			t.Errorf("%+v accepted", r)
		}
	}
}

// TestRetentionNeverBreaksAChain: the simulated year as a schedule with a
// full backup every 7 and increments between (each built on the one
// before). Under each of restic's rule sets, retention keeps restic's set
// and, beyond it, exactly the bases those backups need: every kept
// increment's chain down to its full, nothing else.
func TestRetentionNeverBreaksAChain(t *testing.T) {
	golden := resticSets(t)
	var backups []store.Backup
	for i, at := range simulatedYear() {
		b := store.Backup{ID: fmt.Sprintf("%04d", i), Created: at}
		if i%7 != 0 {
			b.Base = backups[i-1].ID
		}
		backups = append(backups, b)
	}
	byID := map[string]store.Backup{}
	for _, b := range backups {
		byID[b.ID] = b
	}
	for _, c := range retentionCases {
		keep, remove := c.r.Apply(backups)
		kept := map[string]bool{}
		for _, k := range keep {
			kept[k.Backup.ID] = true
		}
		// restic's set, widened by the chains of its members.
		want := map[string]bool{}
		for _, at := range golden[c.name] {
			for _, b := range backups {
				if b.Created.UTC().Format(time.RFC3339) != at {
					continue
				}
				for id := b.ID; id != ""; id = byID[id].Base {
					want[id] = true
				}
			}
		}
		if !maps.Equal(kept, want) {
			t.Errorf("%s: kept %d, restic's set with its chains is %d", c.name, len(kept), len(want))
		}
		for _, k := range keep {
			if k.Backup.Base != "" && !kept[k.Backup.Base] {
				t.Errorf("%s: kept increment %s without its base %s", c.name, k.Backup.ID, k.Backup.Base)
			}
		}
		if len(keep)+len(remove) != len(backups) {
			t.Errorf("%s: %d kept + %d removed of %d", c.name, len(keep), len(remove), len(backups))
		}
	}
}

// resticSets reads the golden file: per rule set, the times of the
// snapshots restic keeps.
func resticSets(t *testing.T) map[string][]string {
	t.Helper()
	raw, err := os.ReadFile(resticGolden)
	if err != nil {
		t.Fatal(err)
	}
	var golden map[string][]string
	if err := json.Unmarshal(raw, &golden); err != nil {
		t.Fatal(err)
	}
	return golden
}

// TestRetentionPeriodsAreUTC: periods are read in UTC whatever zone the
// catalog's times come in (a server not running in UTC reads them in its
// local zone). Each case's backups straddle a period's end in UTC-8 but
// not in UTC, so reading them in UTC-8 keeps a different set.
func TestRetentionPeriodsAreUTC(t *testing.T) {
	west := time.FixedZone("UTC-8", -8*60*60)
	at := func(times ...string) []store.Backup {
		var list []store.Backup
		for _, s := range times {
			u, err := time.Parse(time.RFC3339, s)
			if err != nil {
				t.Fatal(err)
			}
			list = append(list, store.Backup{ID: s, Created: u.In(west)})
		}
		return list
	}
	cases := []struct {
		rule    Retention
		backups []store.Backup
		want    []string
	}{
		// The second and third are on January 1 in UTC-8, on January 2
		// and 1 in UTC.
		{Retention{Daily: 2}, at("2025-01-02T06:00:00Z", "2025-01-02T02:00:00Z", "2025-01-01T10:00:00Z", "2024-12-31T10:00:00Z"),
			[]string{"2025-01-02T06:00:00Z", "2025-01-01T10:00:00Z"}},
		// Monday 6 January 03:00 UTC is Sunday evening, ISO week 1, in UTC-8.
		{Retention{Weekly: 2}, at("2025-01-06T03:00:00Z", "2025-01-03T12:00:00Z", "2024-12-25T12:00:00Z"),
			[]string{"2025-01-06T03:00:00Z", "2025-01-03T12:00:00Z"}},
		// 1 February 03:00 UTC is 31 January in UTC-8.
		{Retention{Monthly: 2}, at("2025-02-01T03:00:00Z", "2025-01-15T12:00:00Z", "2024-12-15T12:00:00Z"),
			[]string{"2025-02-01T03:00:00Z", "2025-01-15T12:00:00Z"}},
		// 1 January 2025 03:00 UTC is still 2024 in UTC-8.
		{Retention{Yearly: 2}, at("2025-01-01T03:00:00Z", "2024-06-01T12:00:00Z", "2023-06-01T12:00:00Z"),
			[]string{"2025-01-01T03:00:00Z", "2024-06-01T12:00:00Z"}},
	}
	for _, c := range cases {
		keep, _ := c.rule.Apply(c.backups)
		var got []string
		for _, k := range keep {
			got = append(got, k.Backup.ID)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%+v keeps %v; want %v (periods in UTC)", c.rule, got, c.want)
		}
	}
}

// TestRetentionPeriodsAcrossYears: a period is its own in each year (the
// same day, ISO week or month a year apart are two periods), and a count
// of -1 is every period while one below it is refused.
func TestRetentionPeriodsAcrossYears(t *testing.T) {
	at := func(times ...string) []store.Backup {
		var list []store.Backup
		for _, s := range times {
			u, err := time.Parse(time.RFC3339, s)
			if err != nil {
				t.Fatal(err)
			}
			list = append(list, store.Backup{ID: s, Created: u})
		}
		return list
	}
	yearApart := at("2025-03-05T12:00:00Z", "2024-03-05T12:00:00Z", "2023-03-05T12:00:00Z")
	for _, rule := range []Retention{{Daily: 2}, {Weekly: 2}, {Monthly: 2}, {Yearly: 2}} {
		keep, remove := rule.Apply(yearApart)
		if len(keep) != 2 || keep[0].Backup.ID != "2025-03-05T12:00:00Z" || keep[1].Backup.ID != "2024-03-05T12:00:00Z" || len(remove) != 1 {
			t.Errorf("%+v over backups a year apart keeps %v; want the newest two", rule, keep)
		}
	}
	// The same day of two months is two days.
	monthApart := at("2025-02-05T12:00:00Z", "2025-01-05T12:00:00Z", "2025-01-04T12:00:00Z")
	if keep, _ := (Retention{Daily: 2}).Apply(monthApart); len(keep) != 2 || keep[1].Backup.ID != "2025-01-05T12:00:00Z" {
		t.Errorf("daily 2 over the 5th of two months keeps %v; want Feb 5 and Jan 5", keep)
	}
	if keep, _ := (Retention{Daily: -1}).Apply(yearApart); len(keep) != 3 {
		t.Errorf("daily -1 keeps %d of 3 days", len(keep))
	}
	if err := (Retention{Daily: -1}).check(); err != nil {
		t.Errorf("a count of -1: %v", err)
	}
	if err := (Retention{Daily: -2}).check(); err == nil {
		t.Error("a count of -2 taken")
	}
}
