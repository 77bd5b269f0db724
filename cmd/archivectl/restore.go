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
	Backup       string `arg:"" predictor:"backup" help:"The backup to restore (catalog id, or a unique prefix of it): a full backup or an increment, whose chain the server reads with it."`
	Owner        string `required:"" help:"Owner (inbox) to restore into."`
	SourceOwner  string `name:"source-owner" help:"The backups' owner when it is not --owner (an account migration: needs archive.migrate)."`
	Chain        bool   `hidden:"" help:"Accepted for scripts written before v0.5.0: an increment always restores with its chain."`
	ValidateOnly bool   `name:"validate-only" help:"A dry run: read and authenticate every backup of the chain, applying nothing."`
	Replace      bool   `help:"A point-in-time restore: afterwards the owner's exportable records are exactly the backup's snapshot (groups as the backup holds them, what it lacks deleted); the owner's next backup is a full one. Without it, a restore adds what the owner lacks and changes nothing it holds."`
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
	mode := cb.ImportMode_IMPORT_MODE_MERGE
	if r.Replace {
		mode = cb.ImportMode_IMPORT_MODE_REPLACE
	}
	op, err := cb.NewBackupServiceClient(conn).StartImport(ctx, &cb.StartImportRequest{Owner: r.Owner, SourceOwner: r.SourceOwner, Backup: r.Backup, ValidateOnly: r.ValidateOnly, Mode: mode})
	if err != nil {
		return fmt.Errorf("restore %s: start import: %w", r.Backup, err)
	}
	if err := c.waitFor(ctx, conn, op.GetName(), true); err != nil {
		return fmt.Errorf("restore %s: %w", r.Backup, err)
	}
	return nil
}
