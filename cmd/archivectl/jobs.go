package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/mattn/go-isatty"
	"github.com/schollz/progressbar/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
)

// jobsCmd drives server-side jobs: BackupService to start them, the
// standard google.longrunning.Operations service for the rest.
type jobsCmd struct {
	StartExport startExportJobCmd `cmd:"" name:"start-export" help:"Start an export job: the server writes the owner's archive to one of its buckets."`
	StartImport startImportJobCmd `cmd:"" name:"start-import" help:"Start an import job: the server reads an archive from one of its buckets into the owner's store."`
	List        listJobsCmd       `cmd:"" help:"List the jobs you may see, oldest first."`
	Get         getJobCmd         `cmd:"" help:"Print one job's operation."`
	Wait        waitJobCmd        `cmd:"" help:"Wait for a job to end, with a progress bar on a terminal; exits non-zero unless it succeeded."`
	Cancel      cancelJobCmd      `cmd:"" help:"Cancel a running job; it ends CANCELLED and commits nothing."`
}

type startExportJobCmd struct {
	Owner               string   `required:"" help:"Owner (inbox) whose records to export."`
	Bucket              string   `help:"Name of one of the server's buckets (its --job-bucket flags); default the server's first."`
	Label               string   `help:"A note kept with the backup in the catalog."`
	Wait                bool     `help:"Wait for the job to end, as 'jobs wait' does."`
	Elements            []string `enum:"messages,consent,none" help:"Categories to export: messages, consent, or none; default both (ARCH-017)."`
	Start               instant  `xor:"start" help:"Export messages sent after this time (exclusive): RFC 3339, a date (UTC midnight), or an age back from now such as 30d or 12h."`
	End                 instant  `xor:"end" help:"Export messages sent up to this time (inclusive), as --start."`
	StartNs             *int64   `name:"start-ns" xor:"start" help:"As --start, in nanoseconds since the epoch."`
	EndNs               *int64   `name:"end-ns" xor:"end" help:"As --end, in nanoseconds since the epoch."`
	ExcludeDisappearing bool     `help:"Leave out messages with an expiry, or whose expiry is unknown."`
	Nonconforming       string   `enum:"fail,exclude,repair" default:"fail" help:"As for export: fail, exclude or repair a stored record the reference would refuse."`
	Since               string   `help:"An earlier complete backup of the owner (catalog id): write an increment holding only what changed since it. 'restore' of an increment reads its whole chain."`
}

func (s *startExportJobCmd) Run(ctx context.Context, c *cli) error {
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	if s.Since != "" {
		if s.Since, err = resolveBackup(ctx, conn, s.Owner, s.Since); err != nil {
			return err
		}
	}
	sel := selectionFlags{Elements: s.Elements, Start: s.Start, End: s.End, StartNs: s.StartNs, EndNs: s.EndNs, ExcludeDisappearing: s.ExcludeDisappearing}
	op, err := cb.NewBackupServiceClient(conn).StartExport(ctx, &cb.StartExportRequest{
		Owner: s.Owner, Options: sel.options(), Bucket: s.Bucket, Label: s.Label,
		Nonconforming: nonconformingModes[s.Nonconforming], SinceBackup: s.Since,
	})
	if err != nil {
		return fmt.Errorf("start export: %w", err)
	}
	return c.started(ctx, conn, op, s.Wait)
}

type startImportJobCmd struct {
	Owner        string `required:"" help:"Owner (inbox) to import into."`
	Backup       string `required:"" predictor:"backup" help:"The backup's catalog id ('backups list'), or a unique prefix of it."`
	SourceOwner  string `name:"source-owner" help:"The backup's owner when it is not --owner (an account migration: needs archive.migrate)."`
	ValidateOnly bool   `name:"validate-only" help:"A dry run: read and authenticate the whole backup and report what the import would insert, update and leave unchanged, applying nothing."`
	Wait         bool   `help:"Wait for the job to end, as 'jobs wait' does."`
}

func (s *startImportJobCmd) Run(ctx context.Context, c *cli) error {
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	source := s.SourceOwner
	if source == "" {
		source = s.Owner
	}
	if s.Backup, err = resolveBackup(ctx, conn, source, s.Backup); err != nil {
		return err
	}
	op, err := cb.NewBackupServiceClient(conn).StartImport(ctx, &cb.StartImportRequest{
		Owner: s.Owner, Backup: s.Backup, SourceOwner: s.SourceOwner, ValidateOnly: s.ValidateOnly,
	})
	if err != nil {
		return fmt.Errorf("start import: %w", err)
	}
	return c.started(ctx, conn, op, s.Wait)
}

// started prints a started job, or waits for it.
func (c *cli) started(ctx context.Context, conn *grpc.ClientConn, op *longrunningpb.Operation, wait bool) error {
	if wait {
		return c.waitFor(ctx, conn, op.GetName(), true)
	}
	return c.printOperation(op)
}

type getJobCmd struct {
	Name string `arg:"" predictor:"operation" help:"The job's operation name (operations/...)."`
}

func (g *getJobCmd) Run(ctx context.Context, c *cli) error {
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	op, err := longrunningpb.NewOperationsClient(conn).GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: g.Name})
	if err != nil {
		return fmt.Errorf("get: %w", err)
	}
	return c.printOperation(op)
}

type cancelJobCmd struct {
	Name string `arg:"" predictor:"operation" help:"The job's operation name (operations/...)."`
}

func (k *cancelJobCmd) Run(ctx context.Context, c *cli) error {
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := longrunningpb.NewOperationsClient(conn).CancelOperation(ctx, &longrunningpb.CancelOperationRequest{Name: k.Name}); err != nil {
		return fmt.Errorf("cancel: %w", err)
	}
	// The job ends within a second; show it ended.
	return c.waitFor(ctx, conn, k.Name, false)
}

type waitJobCmd struct {
	Name string `arg:"" predictor:"operation" help:"The job's operation name (operations/...)."`
}

func (w *waitJobCmd) Run(ctx context.Context, c *cli) error {
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	return c.waitFor(ctx, conn, w.Name, true)
}

type listJobsCmd struct {
	Owner   string `help:"Only this owner's jobs."`
	Running bool   `help:"Only jobs still running."`
}

func (l *listJobsCmd) Run(ctx context.Context, c *cli) error {
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	var terms []string
	if l.Owner != "" {
		q, _ := json.Marshal(l.Owner)
		terms = append(terms, "owner = "+string(q))
	}
	if l.Running {
		terms = append(terms, "done = false")
	}
	req := &longrunningpb.ListOperationsRequest{Name: "operations", Filter: strings.Join(terms, " AND "), PageSize: 100}
	var all []*longrunningpb.Operation
	for {
		resp, err := longrunningpb.NewOperationsClient(conn).ListOperations(ctx, req)
		if err != nil {
			return fmt.Errorf("list: %w", err)
		}
		all = append(all, resp.GetOperations()...)
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
			break
		}
	}
	if c.JSON {
		out := make([]json.RawMessage, 0, len(all))
		for _, op := range all {
			b, err := protoJSON(op)
			if err != nil {
				return err
			}
			out = append(out, b)
		}
		return c.output(out, "")
	}
	fmt.Println("OPERATION  KIND  STATE  OWNER  OBJECT  PROGRESS")
	for _, op := range all {
		fmt.Println(summaryLine(op))
	}
	return nil
}

// summaryLine is one operation in a line: name, kind, owner, state,
// progress and object.
func summaryLine(op *longrunningpb.Operation) string {
	md := &cb.JobMetadata{}
	_ = op.GetMetadata().UnmarshalTo(md)
	kind := strings.ToLower(strings.TrimPrefix(md.GetKind().String(), "JOB_KIND_"))
	state := strings.ToLower(strings.TrimPrefix(md.GetState().String(), "JOB_STATE_"))
	if md.GetValidateOnly() {
		// A dry run applies nothing: it never reads as an import (or an
		// erasure) that happened.
		kind = "dry-run " + kind
	}
	where := md.GetObject().GetBucket() + "/" + md.GetObject().GetKey()
	if md.GetKind() == cb.JobKind_JOB_KIND_ERASE {
		where = "(every bucket)"
	}
	line := fmt.Sprintf("%s  %-6s %-10s %s  %s  %s", op.GetName(), kind, state, md.GetOwner(),
		where, byteCount(md.GetBytesDone(), md.GetBytesTotal()))
	if r := (&cb.ImportJobResult{}); md.GetValidateOnly() && op.GetResponse().UnmarshalTo(r) == nil {
		c := r.GetCounts()
		line += fmt.Sprintf("\nnothing applied; an import would insert %d groups, %d messages and %d consent records, update %d, and leave %d as they are",
			c.GetGroups().GetInserted(), c.GetMessages().GetInserted(), c.GetConsent().GetInserted(),
			c.GetGroups().GetUpdated()+c.GetMessages().GetUpdated()+c.GetConsent().GetUpdated(),
			c.GetGroups().GetUnchanged()+c.GetMessages().GetUnchanged()+c.GetConsent().GetUnchanged())
	}
	if e := op.GetError(); e != nil {
		line += "  error: " + e.GetMessage()
	}
	return line
}

func byteCount(done, total uint64) string {
	if total > 0 {
		return fmt.Sprintf("%.1f of %.1f MiB", float64(done)/(1<<20), float64(total)/(1<<20))
	}
	return fmt.Sprintf("%.1f MiB", float64(done)/(1<<20))
}

// printOperation prints an operation: protojson with --json, else its
// summary line and, when done, its result.
func (c *cli) printOperation(op *longrunningpb.Operation) error {
	if c.JSON {
		b, err := protoJSON(op)
		if err != nil {
			return err
		}
		return c.output(json.RawMessage(b), "")
	}
	fmt.Println(summaryLine(op))
	if r := op.GetResponse(); r != nil {
		m, err := r.UnmarshalNew()
		if err != nil {
			return err
		}
		fmt.Print(resultText(m))
	}
	return nil
}

// waitFor polls the operation with WaitOperation until it is done,
// drawing a progress bar on stderr when it is a terminal; with
// mustSucceed it fails unless the job succeeded.
func (c *cli) waitFor(ctx context.Context, conn *grpc.ClientConn, name string, mustSucceed bool) error {
	ops := longrunningpb.NewOperationsClient(conn)
	var bar *progressbar.ProgressBar
	barStart := time.Now()
	if isatty.IsTerminal(os.Stderr.Fd()) {
		bar = progressbar.NewOptions64(-1, progressbar.OptionSetWriter(os.Stderr), progressbar.OptionShowBytes(true),
			progressbar.OptionSetDescription(name), progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionClearOnFinish())
	}
	for {
		// Short waits, so the bar moves; the server answers as soon as the
		// job ends.
		op, err := ops.WaitOperation(ctx, &longrunningpb.WaitOperationRequest{Name: name, Timeout: durationpb.New(time.Second)})
		if err != nil {
			return fmt.Errorf("wait: %w", err)
		}
		if op.GetName() != name {
			// Never take another answer for this job's end (an older
			// server answered a blank operation when a wait timed out).
			return fmt.Errorf("wait: the server answered operation %q for %q", op.GetName(), name)
		}
		// The bar's rate is the bytes over the time since it was drawn:
		// bytes a job had moved before, counted over its first
		// milliseconds, read as terabytes a second. Its first frame waits
		// a second.
		if bar != nil && time.Since(barStart) >= time.Second {
			md := &cb.JobMetadata{}
			if op.GetMetadata().UnmarshalTo(md) == nil {
				if md.GetBytesTotal() > 0 && bar.GetMax64() != int64(md.GetBytesTotal()) {
					bar.ChangeMax64(int64(md.GetBytesTotal()))
				}
				_ = bar.Set64(int64(md.GetBytesDone()))
			}
		}
		if !op.GetDone() {
			continue
		}
		if bar != nil {
			_ = bar.Finish()
		}
		if err := c.printOperation(op); err != nil {
			return err
		}
		if e := op.GetError(); e != nil && mustSucceed {
			return fmt.Errorf("job %s ended: %s", name, e.GetMessage())
		}
		return nil
	}
}

// writeNew writes a file that must not exist yet, readable by its owner
// only.
func writeNew(path string, body []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%s exists; keys are never overwritten", path)
	}
	if err != nil {
		return err
	}
	if _, err := f.Write(body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// resultText is a finished job's result for people: what an export
// wrote, what an import did.
func resultText(m proto.Message) string {
	switch r := m.(type) {
	case *cb.ExportJobResult:
		sum := r.GetSummary()
		return fmt.Sprintf("backup %s: %d groups, %d messages, %d consent records, %d bytes, sha256 %s\n",
			r.GetBackup(), sum.GetGroups(), sum.GetMessages(), sum.GetConsentRecords(), sum.GetArchiveBytes(), hex.EncodeToString(sum.GetSha256()))
	case *cb.ImportJobResult:
		if rc := r.GetReplaced(); rc != nil {
			kinds := func(what string, k *cb.KindCounts) string {
				return fmt.Sprintf("%s %d groups, %d messages, %d consent", what, k.GetGroups(), k.GetMessages(), k.GetConsent())
			}
			return "replaced: " + kinds("wrote", rc.GetWritten()) + "; " + kinds("deleted", rc.GetDeleted()) + "; " + kinds("kept", rc.GetUnchanged()) +
				fmt.Sprintf("; %d expired, %d conflicts\n", rc.GetExpired(), rc.GetConflicts())
		}
		c := r.GetCounts()
		line := func(what string, e *cb.ElementCounts) string {
			return fmt.Sprintf("%s: %d inserted, %d updated, %d unchanged", what, e.GetInserted(), e.GetUpdated(), e.GetUnchanged())
		}
		return line("groups", c.GetGroups()) + "; " + line("messages", c.GetMessages()) + "; " + line("consent", c.GetConsent()) + "\n"
	case *cb.EraseOwnerResult:
		return eraseText(r)
	}
	b, _ := protoJSON(m)
	return string(b) + "\n"
}
