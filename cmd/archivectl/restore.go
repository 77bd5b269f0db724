package main

import (
	"context"
	"fmt"
	"os"
	"slices"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
)

// restoreCmd imports a backup, or a whole chain of them, from the
// server's catalog, one import job at a time.
type restoreCmd struct {
	Backup       string `arg:"" help:"The backup to restore (catalog id, or a unique prefix of it): with --chain, the newest member of its chain."`
	Owner        string `required:"" help:"Owner (inbox) to restore into."`
	SourceOwner  string `name:"source-owner" help:"The backups' owner when it is not --owner (an account migration: needs archive.migrate)."`
	Chain        bool   `help:"Restore the backup's whole chain: its full backup, then each increment up to it, oldest first. Import is additive and idempotent, so a chain restored this way holds what its newest member's export saw."`
	ValidateOnly bool   `name:"validate-only" help:"A dry run of each import: read and authenticate every backup, applying nothing."`
}

// maxChain bounds the walk down a chain: a catalog that loops (it cannot
// be written so) or a chain far longer than any schedule makes stops it.
const maxChain = 1000

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
	backups := cb.NewBackupServiceClient(conn)
	chain := []string{r.Backup}
	if r.Chain {
		for id := r.Backup; ; {
			b, err := backups.GetBackup(ctx, &cb.GetBackupRequest{Owner: source, Backup: id})
			if err != nil {
				return fmt.Errorf("backup %s: %w", id, err)
			}
			if b.GetState() != cb.BackupState_BACKUP_STATE_COMPLETE {
				return fmt.Errorf("backup %s of the chain is %s: a chain restores only once every member is complete", id, shortState(b.GetState()))
			}
			if id = b.GetBaseBackup(); id == "" {
				break
			}
			if slices.Contains(chain, id) || len(chain) >= maxChain {
				return fmt.Errorf("the chain of %s does not end in a full backup within %d members", r.Backup, maxChain)
			}
			chain = append(chain, id)
		}
		slices.Reverse(chain)
		fmt.Fprintf(os.Stderr, "restoring a chain of %d into %s, oldest first: %v\n", len(chain), r.Owner, chain)
	}
	for i, id := range chain {
		op, err := backups.StartImport(ctx, &cb.StartImportRequest{Owner: r.Owner, SourceOwner: r.SourceOwner, Backup: id, ValidateOnly: r.ValidateOnly})
		if err != nil {
			return fmt.Errorf("restore %s (%d of %d): start import: %w", id, i+1, len(chain), err)
		}
		if err := c.waitFor(ctx, conn, op.GetName(), true); err != nil {
			return fmt.Errorf("restore %s (%d of %d): %w", id, i+1, len(chain), err)
		}
	}
	return nil
}
