package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
)

// statsCmd sums an owner's backups from the catalog, a page at a time:
// what restic's stats gives, without reading an archive.
type statsCmd struct {
	Owner string `required:"" help:"The owner (inbox) whose backups to sum."`
}

// bucketStats is one bucket's sum; counts are strings in JSON, as every
// 64-bit integer archivectl prints.
type bucketStats struct {
	Bucket         string    `json:"bucket"`
	Backups        uint64    `json:"backups,string"`
	Complete       uint64    `json:"complete,string"`
	Increments     uint64    `json:"increments,string"`
	Held           uint64    `json:"held,string"`
	Damaged        uint64    `json:"damaged,string"`
	ArchiveBytes   uint64    `json:"archive_bytes,string"`
	Messages       uint64    `json:"messages,string"`
	OldestComplete string    `json:"oldest_complete,omitempty"`
	NewestComplete string    `json:"newest_complete,omitempty"`
	oldest, newest time.Time // of the complete backups; zero before one
}

func (s *bucketStats) add(b *cb.Backup) {
	s.Backups++
	if b.GetHold() != nil {
		s.Held++
	}
	if b.GetVerifyProblem() != "" {
		s.Damaged++
	}
	if b.GetState() != cb.BackupState_BACKUP_STATE_COMPLETE {
		return
	}
	s.Complete++
	if b.GetBaseBackup() != "" {
		s.Increments++
	}
	s.ArchiveBytes += b.GetSummary().GetArchiveBytes()
	s.Messages += b.GetSummary().GetMessages()
	at := b.GetCompleteTime().AsTime()
	if s.oldest.IsZero() || at.Before(s.oldest) {
		s.oldest = at
	}
	if s.newest.IsZero() || at.After(s.newest) {
		s.newest = at
	}
}

func (s *bucketStats) finish() {
	if !s.oldest.IsZero() {
		s.OldestComplete = s.oldest.UTC().Format(time.RFC3339)
		s.NewestComplete = s.newest.UTC().Format(time.RFC3339)
	}
}

func (s *statsCmd) Run(ctx context.Context, c *cli) error {
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	total := &bucketStats{Bucket: "all"}
	buckets := map[string]*bucketStats{}
	req := &cb.ListBackupsRequest{Owner: s.Owner, PageSize: 500}
	for {
		resp, err := cb.NewBackupServiceClient(conn).ListBackups(ctx, req)
		if err != nil {
			return fmt.Errorf("stats: %w", err)
		}
		for _, b := range resp.GetBackups() {
			name := b.GetObject().GetBucket()
			if buckets[name] == nil {
				buckets[name] = &bucketStats{Bucket: name}
			}
			buckets[name].add(b)
			total.add(b)
		}
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
			break
		}
	}
	rows := []*bucketStats{}
	for _, b := range buckets {
		b.finish()
		rows = append(rows, b)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Bucket < rows[j].Bucket })
	total.finish()
	rows = append(rows, total)
	var text strings.Builder
	tw := tabwriter.NewWriter(&text, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BUCKET\tBACKUPS\tCOMPLETE\tINCREMENTS\tHELD\tDAMAGED\tBYTES\tMESSAGES\tOLDEST\tNEWEST")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t%d\t%s\t%s\n", r.Bucket, r.Backups, r.Complete, r.Increments, r.Held, r.Damaged,
			strconv.FormatUint(r.ArchiveBytes, 10), r.Messages, orDash(r.OldestComplete), orDash(r.NewestComplete))
	}
	_ = tw.Flush()
	return c.output(map[string]any{"owner": s.Owner, "buckets": rows[:len(rows)-1], "total": total}, text.String())
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// diffCmd compares two backups of an owner from the catalog: what their
// summaries count and what they select. Which conversations changed is
// in the archives, not the catalog; restore both (or synthesize) to see
// them.
type diffCmd struct {
	Owner string `required:"" help:"The backups' owner (inbox)."`
	From  string `arg:"" predictor:"backup" help:"The older backup's catalog id, or a unique prefix."`
	To    string `arg:"" predictor:"backup" help:"The newer backup's catalog id, or a unique prefix."`
}

// countChange is one count in both backups; in JSON as strings.
type countChange struct {
	Name  string `json:"name"`
	From  uint64 `json:"from,string"`
	To    uint64 `json:"to,string"`
	Delta int64  `json:"delta,string"`
}

func (d *diffCmd) Run(ctx context.Context, c *cli) error {
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	var pair [2]*cb.Backup
	for i, ref := range []string{d.From, d.To} {
		id, err := resolveBackup(ctx, conn, d.Owner, ref)
		if err != nil {
			return err
		}
		if pair[i], err = cb.NewBackupServiceClient(conn).GetBackup(ctx, &cb.GetBackupRequest{Owner: d.Owner, Backup: id}); err != nil {
			return fmt.Errorf("diff: %w", err)
		}
	}
	a, b := pair[0].GetSummary(), pair[1].GetSummary()
	changes := []countChange{
		{Name: "groups", From: a.GetGroups(), To: b.GetGroups()},
		{Name: "messages", From: a.GetMessages(), To: b.GetMessages()},
		{Name: "consent_records", From: a.GetConsentRecords(), To: b.GetConsentRecords()},
		{Name: "archive_bytes", From: a.GetArchiveBytes(), To: b.GetArchiveBytes()},
	}
	var text strings.Builder
	fmt.Fprintf(&text, "%s (%s) -> %s (%s), %s apart\n", pair[0].GetId(), kindOf(pair[0]), pair[1].GetId(), kindOf(pair[1]),
		pair[1].GetCreateTime().AsTime().Sub(pair[0].GetCreateTime().AsTime()).Round(time.Second))
	tw := tabwriter.NewWriter(&text, 0, 4, 2, ' ', 0)
	for i := range changes {
		ch := &changes[i]
		ch.Delta = int64(ch.To) - int64(ch.From)
		fmt.Fprintf(tw, "%s\t%d\t%d\t%+d\n", ch.Name, ch.From, ch.To, ch.Delta)
	}
	_ = tw.Flush()
	sameSelection := optionsText(pair[0]) == optionsText(pair[1])
	if !sameSelection {
		fmt.Fprintf(&text, "selection differs: %s, then %s\n", optionsText(pair[0]), optionsText(pair[1]))
	}
	increment := pair[1].GetBaseBackup() == pair[0].GetId()
	if increment {
		fmt.Fprintf(&text, "%s is an increment on %s: its counts are what changed after it\n", pair[1].GetId(), pair[0].GetId())
	}
	return c.output(map[string]any{"owner": d.Owner, "from": pair[0].GetId(), "to": pair[1].GetId(), "counts": changes,
		"same_selection": sameSelection, "to_is_increment_of_from": increment}, text.String())
}

// kindOf says whether b is a full backup or an increment.
func kindOf(b *cb.Backup) string {
	if b.GetBaseBackup() != "" {
		return "increment"
	}
	return "full"
}

// optionsText is a backup's selection and window, for comparing two.
func optionsText(b *cb.Backup) string {
	o := b.GetOptions()
	if o == nil {
		return "everything"
	}
	var sel []string
	for _, e := range o.GetElements() {
		sel = append(sel, strings.TrimPrefix(e.String(), "BACKUP_ELEMENT_SELECTION_"))
	}
	return fmt.Sprintf("%s window %s..%s", strings.Join(sel, "+"), optNs(o.StartNs), optNs(o.EndNs))
}
