package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"

	"google.golang.org/grpc"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
)

type exportCmd struct {
	keyFlags
	Owner  string `required:"" help:"Owner (inbox) whose records to export."`
	Output string `short:"o" required:"" type:"path" predictor:"file" help:"Archive file to write; written to a temporary file and put in place only once complete."`
	Force  bool   `help:"Replace --output if it exists (without it, an existing file is refused before the export starts)."`
	selectionFlags
}

// selectionFlags say what an export holds and what it does with a record
// the reference would refuse.
type selectionFlags struct {
	Elements            []string `enum:"messages,consent,none" help:"Categories to export: messages, consent, or none; default both (ARCH-017)."`
	Start               instant  `xor:"start" help:"Export messages sent after this time (exclusive): RFC 3339, a date (UTC midnight), or an age back from now such as 30d or 12h."`
	End                 instant  `xor:"end" help:"Export messages sent up to this time (inclusive), as --start."`
	StartNs             *int64   `name:"start-ns" xor:"start" help:"As --start, in nanoseconds since the epoch."`
	EndNs               *int64   `name:"end-ns" xor:"end" help:"As --end, in nanoseconds since the epoch."`
	ExcludeDisappearing bool     `help:"Leave out messages with an expiry, or whose expiry is unknown."`
	Nonconforming       string   `enum:"fail,exclude,repair" default:"fail" help:"A stored record the reference client's import would refuse ('lint' lists them): fail the export, exclude it (counted), or repair it where the repair is lossless and exclude it otherwise."`
}

// nonconformingModes are the --nonconforming values.
var nonconformingModes = map[string]cb.NonconformingRecords{
	"fail":    cb.NonconformingRecords_NONCONFORMING_RECORDS_FAIL,
	"exclude": cb.NonconformingRecords_NONCONFORMING_RECORDS_EXCLUDE,
	"repair":  cb.NonconformingRecords_NONCONFORMING_RECORDS_REPAIR,
}

func (e *selectionFlags) options() *ds.ArchiveOptions {
	e.StartNs, e.EndNs = e.Start.or(e.StartNs), e.End.or(e.EndNs)
	if len(e.Elements) == 0 && e.StartNs == nil && e.EndNs == nil && !e.ExcludeDisappearing {
		return nil // every default (ARCH-017)
	}
	opts := &ds.ArchiveOptions{StartNs: e.StartNs, EndNs: e.EndNs, ExcludeDisappearingMessages: e.ExcludeDisappearing}
	elements := e.Elements
	if len(elements) == 0 {
		elements = []string{"messages", "consent"}
	}
	for _, el := range elements {
		switch el {
		case "messages":
			opts.Elements = append(opts.Elements, ds.BackupElementSelection_BACKUP_ELEMENT_SELECTION_MESSAGES)
		case "consent":
			opts.Elements = append(opts.Elements, ds.BackupElementSelection_BACKUP_ELEMENT_SELECTION_CONSENT)
		}
	}
	return opts
}

type estimateCmd struct {
	Owner string `required:"" help:"Owner (inbox) whose export to estimate."`
	selectionFlags
}

func (e *estimateCmd) Run(ctx context.Context, c *cli) error {
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := cb.NewArchiveServiceClient(conn).EstimateExport(ctx, &cb.EstimateExportRequest{Owner: e.Owner, Options: e.options(),
		Nonconforming: nonconformingModes[e.Nonconforming]})
	if err != nil {
		return fmt.Errorf("estimate: %w", err)
	}
	sum := resp.GetSummary()
	if sum.GetGroups() == 0 {
		noteRestored(ctx, conn, e.Owner)
	}
	if c.JSON {
		// The summary as the API names it, as export's is.
		j, err := protoWith(sum, nil)
		if err != nil {
			return err
		}
		return c.output(j, "")
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "GROUPS\tMESSAGES\tCONSENT\tBYTES\tEXCLUDED\tREPAIRED")
	fmt.Fprintf(w, "%d\t%d\t%d\t%d\t%d\t%d\n", sum.GetGroups(), sum.GetMessages(), sum.GetConsentRecords(), sum.GetArchiveBytes(),
		sum.GetExcludedRecords(), sum.GetRepairedRecords())
	return w.Flush()
}

// noteRestored says on stderr why an owner whose export holds no group
// may still have conversations: restored ones (imported from an archive)
// are never exported until activated (ARCH-026). Said only when the
// principal may list the owner's groups; otherwise nothing is said.
func noteRestored(ctx context.Context, conn *grpc.ClientConn, owner string) {
	page, err := cb.NewConversationServiceClient(conn).ListGroups(ctx, &cb.ListGroupsRequest{Owner: owner, PageSize: 1000})
	if err != nil {
		return
	}
	restored := 0
	for _, g := range page.GetGroups() {
		if g.GetMembershipState() == gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_RESTORED {
			restored++
		}
	}
	if restored > 0 {
		more := ""
		if page.GetNextPageToken() != "" {
			more = " or more"
		}
		fmt.Fprintf(os.Stderr, "note: %s has %d%s restored conversations (imported from an archive); restored conversations and their messages are not exported (ARCH-026) until a Welcome activates them (ActivateGroup)\n", owner, restored, more)
	}
}

func (e *exportCmd) Run(ctx context.Context, c *cli) error {
	if err := refuseOverwrite(e.Output, e.Force); err != nil {
		return err
	}
	key, err := e.key()
	if err != nil {
		return err
	}
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	stream, err := cb.NewArchiveServiceClient(conn).Export(ctx, &cb.ExportRequest{Owner: e.Owner, Key: key, Options: e.options(),
		Nonconforming: nonconformingModes[e.Nonconforming]})
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	var summary *cb.ExportSummary
	err = writeAtomically(e.Output, e.Force, func(w io.Writer) error {
		h := sha256.New()
		out := io.MultiWriter(w, h)
		prog := newProgress("exported", 0)
		var n uint64
		for {
			m, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return fmt.Errorf("export: %w", err)
			}
			if summary != nil {
				return errors.New("export: the server sent data after its summary")
			}
			if chunk := m.GetChunk(); len(chunk) > 0 {
				if _, err := out.Write(chunk); err != nil {
					return err
				}
				n += uint64(len(chunk))
				prog.add(len(chunk))
			}
			summary = m.GetSummary()
		}
		return checkSummary(summary, n, h)
	})
	if err != nil {
		return err
	}
	j, err := protoWith(summary, map[string]any{"file": e.Output})
	if err != nil {
		return err
	}
	return c.output(j, fmt.Sprintf("wrote %s: %d groups, %d messages, %d consent records, %d bytes, sha256 %x%s\n",
		e.Output, summary.GetGroups(), summary.GetMessages(), summary.GetConsentRecords(), summary.GetArchiveBytes(), summary.GetSha256(),
		nonconformingNote(summary)))
}

// nonconformingNote says what an export left out or repaired.
func nonconformingNote(s *cb.ExportSummary) string {
	if s.GetExcludedRecords() == 0 && s.GetRepairedRecords() == 0 {
		return ""
	}
	return fmt.Sprintf("; %d nonconforming records excluded, %d repaired ('archivectl lint' lists them)", s.GetExcludedRecords(), s.GetRepairedRecords())
}

// checkSummary: without the summary, or with one that does not describe
// the bytes received, the file is not a complete backup.
func checkSummary(s *cb.ExportSummary, n uint64, h hash.Hash) error {
	if s == nil {
		return errors.New("export: the stream ended without a summary; the archive is incomplete and was not kept")
	}
	if !matches(s, n, h) {
		return fmt.Errorf("export: received %d bytes with sha256 %x, but the summary says %d bytes with %x; not kept", n, h.Sum(nil), s.GetArchiveBytes(), s.GetSha256())
	}
	return nil
}

// matches reports whether a summary describes n bytes hashing to h.
func matches(s *cb.ExportSummary, n uint64, h hash.Hash) bool {
	return s.GetArchiveBytes() == n && bytes.Equal(s.GetSha256(), h.Sum(nil))
}

// errExists is a file that would be overwritten without --force.
func errExists(path string) error {
	return fmt.Errorf("%s exists; --force replaces it", path)
}

// refuseOverwrite fails, before any work, when path exists and force is
// not set.
func refuseOverwrite(path string, force bool) error {
	if _, err := os.Lstat(path); err == nil && !force {
		return errExists(path)
	}
	return nil
}

// writeAtomically writes path through a temporary file beside it, synced
// and put in place only when write succeeds: renamed over path with
// force, else linked, which fails if path appeared meanwhile.
func writeAtomically(path string, force bool, write func(io.Writer) error) (err error) {
	if err := refuseOverwrite(path, force); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.partial")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := write(tmp); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if force {
		return os.Rename(tmp.Name(), path)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, os.ErrExist) {
			return errExists(path)
		}
		return err
	}
	return os.Remove(tmp.Name())
}
