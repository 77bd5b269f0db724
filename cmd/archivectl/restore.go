package main

import (
	"context"
	"fmt"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
)

// restoreCmd restores a backup from the server's catalog in one import
// job: the snapshot the backup was taken from, an increment's whole chain
// read as one by the server.
type restoreCmd struct {
	Backup       string `arg:"" help:"The backup to restore (catalog id, or a unique prefix of it): a full backup or an increment, whose chain the server reads with it."`
	Owner        string `required:"" help:"Owner (inbox) to restore into."`
	SourceOwner  string `name:"source-owner" help:"The backups' owner when it is not --owner (an account migration: needs archive.migrate)."`
	Chain        bool   `hidden:"" help:"Accepted for scripts written before v0.5.0: an increment always restores with its chain."`
	ValidateOnly bool   `name:"validate-only" help:"A dry run: read and authenticate every backup of the chain, applying nothing."`
}

func (r *restoreCmd) Run(ctx context.Context, c *cli) error {
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	source := r.SourceOwner
	if source == "" {
		source = r.Owner
	}
	if r.Backup, err = resolveBackup(ctx, conn, source, r.Backup); err != nil {
		return err
	}
	op, err := cb.NewBackupServiceClient(conn).StartImport(ctx, &cb.StartImportRequest{Owner: r.Owner, SourceOwner: r.SourceOwner, Backup: r.Backup, ValidateOnly: r.ValidateOnly})
	if err != nil {
		return fmt.Errorf("restore %s: start import: %w", r.Backup, err)
	}
	if err := c.waitFor(ctx, conn, op.GetName(), true); err != nil {
		return fmt.Errorf("restore %s: %w", r.Backup, err)
	}
	return nil
}
