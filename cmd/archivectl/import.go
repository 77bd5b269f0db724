package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	"github.com/contentbackup/contentbackup/internal/archive"
)

type importCmd struct {
	keyFlags
	Owner string `required:"" help:"Owner (inbox) to import into."`
	File  string `arg:"" type:"existingfile" predictor:"file" help:"Archive file."`
}

func (i *importCmd) Run(ctx context.Context, c *cli) error {
	key, err := i.key()
	if err != nil {
		return err
	}
	f, err := os.Open(i.File)
	if err != nil {
		return err
	}
	defer f.Close()
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	stream, err := cb.NewArchiveServiceClient(conn).Import(ctx)
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	if err := stream.Send(&cb.ImportRequest{Payload: &cb.ImportRequest_Start{Start: &cb.ImportStart{Owner: i.Owner, Key: key}}}); err != nil {
		return fmt.Errorf("import: %w", err)
	}
	var size uint64
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
		size = uint64(fi.Size())
	}
	prog := newProgress("sent", size)
	buf := make([]byte, 256<<10)
	for {
		n, rerr := f.Read(buf)
		if n > 0 {
			if err := stream.Send(&cb.ImportRequest{Payload: &cb.ImportRequest_Chunk{Chunk: buf[:n]}}); err != nil {
				break // the server has answered; CloseAndRecv says how
			}
			prog.add(n)
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return fmt.Errorf("read %s: %w", i.File, rerr)
		}
	}
	res, err := stream.CloseAndRecv()
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	counts := func(e *cb.ElementCounts) map[string]uint64 {
		return map[string]uint64{"inserted": e.GetInserted(), "updated": e.GetUpdated(), "unchanged": e.GetUnchanged()}
	}
	line := func(name string, e *cb.ElementCounts) string {
		return fmt.Sprintf("%-9s %d inserted, %d updated, %d unchanged\n", name+":", e.GetInserted(), e.GetUpdated(), e.GetUnchanged())
	}
	return c.output(map[string]any{
		"metadata": metadataJSON(res.GetMetadata()), "groups": counts(res.GetGroups()), "messages": counts(res.GetMessages()),
		"consent": counts(res.GetConsent()), "records": res.GetRecords(), "skipped": res.GetSkipped(), "legacy_records": res.GetLegacyRecords(),
	}, line("groups", res.GetGroups())+line("messages", res.GetMessages())+line("consent", res.GetConsent())+
		fmt.Sprintf("records:  %d read, %d skipped, %d under the legacy nonce\n", res.GetRecords(), res.GetSkipped(), res.GetLegacyRecords()))
}

type inspectCmd struct {
	keyFlags
	File string `arg:"" type:"existingfile" predictor:"file" help:"Archive file."`
}

func (i *inspectCmd) Run(c *cli) error {
	r, meta, closeArchive, err := i.openArchive(i.File)
	if err != nil {
		return err
	}
	defer closeArchive()
	form := "counter"
	if r.Stats().Record0Legacy {
		form = "legacy"
	}
	return c.output(map[string]any{"version": r.Version(), "metadata": metadataJSON(meta), "record0_nonce": form},
		fmt.Sprintf("version:     %d\n%srecord 0:    %s nonce\n", r.Version(), metadataText(meta), form))
}

type rewrapCmd struct {
	keyFlags
	NewKeyFile string `name:"new-key-file" env:"NEW_ARCHIVE_KEY_FILE" predictor:"file" help:"File holding the new key, raw or hex. Or set NEW_ARCHIVE_KEY to the hex."`
	Output     string `short:"o" required:"" type:"path" predictor:"file" help:"Archive file to write (through a temporary file)."`
	Force      bool   `help:"Replace --output if it exists."`
	File       string `arg:"" type:"existingfile" predictor:"file" help:"Archive file to read."`
}

func (rw *rewrapCmd) Run(c *cli) error {
	newKey, err := loadKey(rw.NewKeyFile, "NEW_ARCHIVE_KEY", "--new-key-file")
	if err != nil {
		return err
	}
	r, meta, closeArchive, err := rw.openArchive(rw.File)
	if err != nil {
		return err
	}
	defer closeArchive()
	var written uint64
	err = writeAtomically(rw.Output, rw.Force, func(out io.Writer) error {
		w, err := archive.NewWriter(out, newKey)
		if err != nil {
			return err
		}
		if err := w.WriteElement(&ds.BackupElement{Element: &ds.BackupElement_Metadata{Metadata: meta}}); err != nil {
			return err
		}
		for {
			el, err := r.NextShared()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			if err := w.WriteElement(el); err != nil {
				return err
			}
		}
		written = w.Records()
		return w.Close()
	})
	if err != nil {
		return err
	}
	st := r.Stats()
	return c.output(map[string]any{"file": rw.Output, "records_written": written, "records_read": st.Records, "legacy_records_read": st.Legacy, "skipped": st.Skipped},
		fmt.Sprintf("wrote %s: %d records in the counter form (read %d, %d under the legacy nonce, %d unknown skipped)\n",
			rw.Output, written, st.Records, st.Legacy, st.Skipped))
}
