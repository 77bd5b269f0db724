package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
)

// backupsCmd reads and manages the server's backup catalog: each backup
// is named by its owner and catalog id, never by a key in a bucket.
type backupsCmd struct {
	List       listBackupsCmd  `cmd:"" help:"List an owner's backups, newest first."`
	Show       showBackupCmd   `cmd:"" help:"Print one backup."`
	Key        backupKeyCmd    `cmd:"" help:"Write a backup's archive key (64 hex characters, mode 0600) to a file, for verify, inspect or a device; the server logs it as an audit event."`
	Delete     deleteBackupCmd `cmd:"" help:"Delete a backup: its object, sidecar and catalog row."`
	Verify     verifyBackupCmd `cmd:"" help:"Read a complete backup back now, as a schedule's verification does (length, SHA-256, every record, the counts), and record the result; exits non-zero when it is not sound."`
	Retention  retentionCmd    `cmd:"" help:"Dry run of a retention for an owner, computed by the server: a schedule's as it runs it, or --keep-* rules of your own; which backups stay (by which rule) and which it would delete. Deletes nothing."`
	Stats      statsCmd        `cmd:"" help:"Sum an owner's backups per bucket from the catalog: how many, complete, increments, held, damaged, their bytes and messages, the oldest and newest. Reads no archive."`
	Diff       diffCmd         `cmd:"" help:"Compare two backups of an owner from the catalog: their groups, messages, consent records and bytes, their selections, and whether the newer is an increment on the older."`
	Synthesize synthesizeCmd   `cmd:"" help:"Write a backup's snapshot (an increment's whole chain read as one) as a new full backup, without touching the owner's records: the one archive to hand a device or the reference client, whose import then gives exactly that snapshot. Prints the new backup's id."`
}

type synthesizeCmd struct {
	backupRef
	Bucket string `help:"Name of one of the server's buckets for the new backup; default the server's first."`
	Label  string `help:"A note kept with the new backup; default 'synthetic full of <id>'."`
}

func (s *synthesizeCmd) Run(ctx context.Context, c *cli) error {
	conn, err := s.dial(ctx, c)
	if err != nil {
		return err
	}
	defer conn.Close()
	op, err := cb.NewBackupServiceClient(conn).StartExport(ctx, &cb.StartExportRequest{Owner: s.Owner, Bucket: s.Bucket, Label: s.Label, FromBackup: s.Backup})
	if err != nil {
		return fmt.Errorf("synthesize %s: %w", s.Backup, err)
	}
	return c.started(ctx, conn, op, true)
}

type backupRef struct {
	Owner  string `required:"" help:"The backup's owner (inbox)."`
	Backup string `arg:"" predictor:"backup" help:"The backup's catalog id, or a unique prefix of it (at least 4 hex digits)."`
}

// dial connects to the server and resolves the backup's id (a unique
// prefix is accepted) in place.
func (r *backupRef) dial(ctx context.Context, c *cli) (*grpc.ClientConn, error) {
	conn, err := c.dial()
	if err != nil {
		return nil, err
	}
	if r.Backup, err = resolveBackup(ctx, conn, r.Owner, r.Backup); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

type listBackupsCmd struct {
	Owner string `required:"" help:"Owner (inbox) whose backups to list."`
}

func (l *listBackupsCmd) Run(ctx context.Context, c *cli) error {
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	all, err := allBackups(ctx, conn, l.Owner)
	if err != nil {
		return err
	}
	if c.JSON {
		out := make([]json.RawMessage, 0, len(all))
		for _, b := range all {
			j, err := protoJSON(b)
			if err != nil {
				return err
			}
			out = append(out, j)
		}
		return c.output(out, "")
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tSTATE\tKIND\tCREATED\tWINDOW\tGROUPS\tMESSAGES\tCONSENT\tBYTES\tVERIFIED\tHOLD\tBY\tLABEL")
	for _, b := range all {
		s := b.GetSummary()
		hold := "-"
		if h := b.GetHold(); h != nil {
			hold = h.GetReason()
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", b.GetId(), shortState(b.GetState()), kind(b),
			b.GetCreateTime().AsTime().UTC().Format("2006-01-02T15:04:05Z"), window(b.GetOptions()), s.GetGroups(), s.GetMessages(),
			s.GetConsentRecords(), s.GetArchiveBytes(), verified(b), hold, b.GetPrincipal(), b.GetLabel())
	}
	return w.Flush()
}

type retentionCmd struct {
	Owner       string `required:"" help:"Owner (inbox) whose backups to weigh."`
	Schedule    string `help:"A schedule the server runs: its backups, under its rules unless --keep-* flags are given. Without it, every complete backup of the owner, under the --keep-* rules."`
	KeepLast    int32  `name:"keep-last" help:"Keep the newest n backups (restic's --keep-last)."`
	KeepDaily   int32  `name:"keep-daily" help:"Keep the newest backup of each of the last n days that have one (UTC); -1: every day."`
	KeepWeekly  int32  `name:"keep-weekly" help:"The same for ISO weeks."`
	KeepMonthly int32  `name:"keep-monthly" help:"The same for months."`
	KeepYearly  int32  `name:"keep-yearly" help:"The same for years."`
}

func (r *retentionCmd) Run(ctx context.Context, c *cli) error {
	req := &cb.PlanRetentionRequest{Owner: r.Owner, Schedule: r.Schedule}
	if r.KeepLast != 0 || r.KeepDaily != 0 || r.KeepWeekly != 0 || r.KeepMonthly != 0 || r.KeepYearly != 0 {
		req.Rules = &cb.RetentionRules{Last: r.KeepLast, Daily: r.KeepDaily, Weekly: r.KeepWeekly, Monthly: r.KeepMonthly, Yearly: r.KeepYearly}
	} else if r.Schedule == "" {
		return errors.New("name a --schedule, or give --keep-last, --keep-daily, --keep-weekly, --keep-monthly or --keep-yearly")
	}
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	plan, err := cb.NewBackupServiceClient(conn).PlanRetention(ctx, req)
	if err != nil {
		return err
	}
	if c.JSON {
		b, err := protoJSON(plan)
		if err != nil {
			return err
		}
		_, err = fmt.Println(string(b))
		return err
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tCREATED\tKIND\tACTION\tRULES\tLABEL")
	kept := 0
	for _, d := range plan.GetDecisions() {
		b, action := d.GetBackup(), "delete"
		if d.GetKeep() {
			action = "keep"
			kept++
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", b.GetId(), b.GetCreateTime().AsTime().UTC().Format(time.RFC3339), kind(b), action, strings.Join(d.GetRules(), ","), b.GetLabel())
	}
	if err := w.Flush(); err != nil {
		return err
	}
	rr := plan.GetRules()
	fmt.Printf("%d kept, %d to delete under last %d, daily %d, weekly %d, monthly %d, yearly %d (dry run: nothing was deleted)\n",
		kept, len(plan.GetDecisions())-kept, rr.GetLast(), rr.GetDaily(), rr.GetWeekly(), rr.GetMonthly(), rr.GetYearly())
	return nil
}

// window is an export's time window as (start, end] in ns; "all" when
// it has none.
// kind is "full", or "+<base>" for an increment of base.
func kind(b *cb.Backup) string {
	if b.GetBaseBackup() == "" {
		return "full"
	}
	return "+" + b.GetBaseBackup()
}

func window(o *ds.ArchiveOptions) string {
	if o == nil || (o.StartNs == nil && o.EndNs == nil) {
		return "all"
	}
	bound := func(v *int64) string {
		if v == nil {
			return ""
		}
		return fmt.Sprint(*v)
	}
	return "(" + bound(o.StartNs) + "," + bound(o.EndNs) + "]"
}

// verified is when the backup was last read back, and whether it was
// sound: "-" when never.
func verified(b *cb.Backup) string {
	if b.GetVerifyTime() == nil {
		return "-"
	}
	at := b.GetVerifyTime().AsTime().UTC().Format("2006-01-02T15:04:05Z")
	if b.GetVerifyProblem() != "" {
		return at + " DAMAGED"
	}
	return at + " ok"
}

// allBackups is every backup of owner in the catalog, newest first, read
// a page at a time.
func allBackups(ctx context.Context, conn *grpc.ClientConn, owner string) ([]*cb.Backup, error) {
	req := &cb.ListBackupsRequest{Owner: owner, PageSize: 500}
	var all []*cb.Backup
	for {
		resp, err := cb.NewBackupServiceClient(conn).ListBackups(ctx, req)
		if err != nil {
			return nil, fmt.Errorf("list: %w", err)
		}
		all = append(all, resp.GetBackups()...)
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
			return all, nil
		}
	}
}

func shortState(s cb.BackupState) string {
	switch s {
	case cb.BackupState_BACKUP_STATE_COMPLETE:
		return "complete"
	case cb.BackupState_BACKUP_STATE_WRITING:
		return "writing"
	case cb.BackupState_BACKUP_STATE_DELETING:
		return "deleting"
	}
	return "unknown"
}

type showBackupCmd struct{ backupRef }

func (s *showBackupCmd) Run(ctx context.Context, c *cli) error {
	conn, err := s.dial(ctx, c)
	if err != nil {
		return err
	}
	defer conn.Close()
	b, err := cb.NewBackupServiceClient(conn).GetBackup(ctx, &cb.GetBackupRequest{Owner: s.Owner, Backup: s.Backup})
	if err != nil {
		return fmt.Errorf("show: %w", err)
	}
	if c.JSON {
		j, err := protoJSON(b)
		if err != nil {
			return err
		}
		return c.output(json.RawMessage(j), "")
	}
	sum := b.GetSummary()
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	for _, row := range [][2]string{
		{"id", b.GetId()}, {"owner", b.GetOwner()}, {"state", shortState(b.GetState())}, {"kind", kind(b)},
		{"label", b.GetLabel()}, {"schedule", b.GetSchedule()},
		{"created", b.GetCreateTime().AsTime().UTC().Format(time.RFC3339)},
		{"object", b.GetObject().GetBucket() + "/" + b.GetObject().GetKey()},
		{"window", window(b.GetOptions())},
		{"records", fmt.Sprintf("%d groups, %d messages, %d consent", sum.GetGroups(), sum.GetMessages(), sum.GetConsentRecords())},
		{"bytes", fmt.Sprint(sum.GetArchiveBytes())},
		{"sha256", hex.EncodeToString(sum.GetSha256())},
		{"verified", verified(b)},
	} {
		fmt.Fprintf(w, "%s:\t%s\n", row[0], row[1])
	}
	if p := b.GetVerifyProblem(); p != "" {
		fmt.Fprintf(w, "problem:\t%s\n", p)
	}
	return w.Flush()
}

type backupKeyCmd struct {
	backupRef
	Out string `short:"o" required:"" type:"path" help:"File to write the key to; it must not exist."`
}

func (k *backupKeyCmd) Run(ctx context.Context, c *cli) error {
	conn, err := k.dial(ctx, c)
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := cb.NewBackupServiceClient(conn).GetBackupKey(ctx, &cb.GetBackupKeyRequest{Owner: k.Owner, Backup: k.Backup})
	if err != nil {
		return fmt.Errorf("key: %w", err)
	}
	if err := writeNew(k.Out, []byte(hex.EncodeToString(resp.GetKey())+"\n")); err != nil {
		return err
	}
	return c.output(map[string]any{"backup": k.Backup, "file": k.Out}, fmt.Sprintf("wrote backup %s's key to %s\n", k.Backup, k.Out))
}

type deleteBackupCmd struct{ backupRef }

func (d *deleteBackupCmd) Run(ctx context.Context, c *cli) error {
	conn, err := d.dial(ctx, c)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := cb.NewBackupServiceClient(conn).DeleteBackup(ctx, &cb.DeleteBackupRequest{Owner: d.Owner, Backup: d.Backup}); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	return c.output(map[string]any{"deleted": d.Backup}, fmt.Sprintf("deleted backup %s\n", d.Backup))
}

// errNoBackupPrefix: no backup of the owner has an id with the prefix
// given; another owner's reads the same (the catalog lists only the
// owner's), which hints.go knows.
var errNoBackupPrefix = errors.New("backup not found")

// minPrefix is the shortest id prefix archivectl resolves: shorter ones
// would match too often to be worth a listing.
const minPrefix = 4

// resolveBackup turns a unique prefix of one of owner's backup ids into
// the id, as git does with commits; a whole id (32 hex digits) is taken
// as it is, without a listing.
func resolveBackup(ctx context.Context, conn *grpc.ClientConn, owner, id string) (string, error) {
	id = strings.ToLower(id)
	if len(id) == 32 {
		return id, nil
	}
	if len(id) < minPrefix {
		return "", fmt.Errorf("backup id %q: give at least %d of its 32 hex digits", id, minPrefix)
	}
	all, err := allBackups(ctx, conn, owner)
	if err != nil {
		return "", err
	}
	var found []string
	for _, b := range all {
		if strings.HasPrefix(b.GetId(), id) {
			found = append(found, b.GetId())
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("%w: no backup of %s has an id starting %s (archivectl backups list --owner %s lists them)", errNoBackupPrefix, owner, id, owner)
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("backup id %s is ambiguous: %s", id, strings.Join(found, ", "))
}

type verifyBackupCmd struct{ backupRef }

func (v *verifyBackupCmd) Run(ctx context.Context, c *cli) error {
	conn, err := v.dial(ctx, c)
	if err != nil {
		return err
	}
	defer conn.Close()
	b, err := cb.NewBackupServiceClient(conn).VerifyBackup(ctx, &cb.VerifyBackupRequest{Owner: v.Owner, Backup: v.Backup})
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	sound := b.GetVerifyProblem() == ""
	text := fmt.Sprintf("backup %s is sound (read back %s)\n", b.GetId(), b.GetVerifyTime().AsTime().UTC().Format(time.RFC3339))
	if !sound {
		text = fmt.Sprintf("backup %s is NOT sound: %s\n", b.GetId(), b.GetVerifyProblem())
	}
	if err := c.output(map[string]any{"backup": b.GetId(), "sound": sound, "problem": b.GetVerifyProblem(),
		"verified": b.GetVerifyTime().AsTime().UTC().Format(time.RFC3339Nano)}, text); err != nil {
		return err
	}
	if !sound {
		return fmt.Errorf("backup %s failed verification", b.GetId())
	}
	return nil
}
