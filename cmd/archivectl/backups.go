package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
)

// backupsCmd reads and manages the server's backup catalog: each backup
// is named by its owner and catalog id, never by a key in a bucket.
type backupsCmd struct {
	List   listBackupsCmd  `cmd:"" help:"List an owner's backups, newest first."`
	Show   showBackupCmd   `cmd:"" help:"Print one backup."`
	Key    backupKeyCmd    `cmd:"" help:"Write a backup's archive key (64 hex characters, mode 0600) to a file, for verify, inspect or a device; the server logs it as an audit event."`
	Delete deleteBackupCmd `cmd:"" help:"Delete a backup: its object, sidecar and catalog row."`
}

type backupRef struct {
	Owner  string `required:"" help:"The backup's owner (inbox)."`
	Backup string `arg:"" help:"The backup's catalog id."`
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
	req := &cb.ListBackupsRequest{Owner: l.Owner, PageSize: 500}
	var all []*cb.Backup
	for {
		resp, err := cb.NewBackupServiceClient(conn).ListBackups(ctx, req)
		if err != nil {
			return fmt.Errorf("list: %w", err)
		}
		all = append(all, resp.GetBackups()...)
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
			break
		}
	}
	if c.JSON {
		out := make([]json.RawMessage, 0, len(all))
		for _, b := range all {
			j, err := protojson.Marshal(b)
			if err != nil {
				return err
			}
			out = append(out, j)
		}
		return c.output(out, "")
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tSTATE\tCREATED\tGROUPS\tMESSAGES\tCONSENT\tBYTES\tBY\tLABEL")
	for _, b := range all {
		s := b.GetSummary()
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", b.GetId(), shortState(b.GetState()),
			b.GetCreateTime().AsTime().UTC().Format("2006-01-02T15:04:05Z"), s.GetGroups(), s.GetMessages(),
			s.GetConsentRecords(), s.GetArchiveBytes(), b.GetPrincipal(), b.GetLabel())
	}
	return w.Flush()
}

func shortState(s cb.BackupState) string {
	switch s {
	case cb.BackupState_BACKUP_STATE_COMPLETE:
		return "complete"
	case cb.BackupState_BACKUP_STATE_WRITING:
		return "writing"
	}
	return "unknown"
}

type showBackupCmd struct{ backupRef }

func (s *showBackupCmd) Run(ctx context.Context, c *cli) error {
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	b, err := cb.NewBackupServiceClient(conn).GetBackup(ctx, &cb.GetBackupRequest{Owner: s.Owner, Backup: s.Backup})
	if err != nil {
		return fmt.Errorf("show: %w", err)
	}
	return printProto(b)
}

func printProto(m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true}.Marshal(m)
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return nil
}

type backupKeyCmd struct {
	backupRef
	Out string `short:"o" required:"" type:"path" help:"File to write the key to; it must not exist."`
}

func (k *backupKeyCmd) Run(ctx context.Context, c *cli) error {
	conn, err := c.dial()
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
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := cb.NewBackupServiceClient(conn).DeleteBackup(ctx, &cb.DeleteBackupRequest{Owner: d.Owner, Backup: d.Backup}); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	return c.output(map[string]any{"deleted": d.Backup}, fmt.Sprintf("deleted backup %s\n", d.Backup))
}
