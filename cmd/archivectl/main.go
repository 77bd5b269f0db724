// Command archivectl is the operator's CLI for archives: export and import
// through a running server, and inspect, verify and rewrap local files
// without one.
//
// Keys come from a file (32 raw bytes or 64 hex characters) or an
// environment variable, never from a flag value that would show in ps, and
// are never printed.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/alecthomas/kong"
	"github.com/willabides/kongplete"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	"github.com/contentbackup/contentbackup/internal/archive"
	"github.com/contentbackup/contentbackup/internal/buildinfo"
	"github.com/contentbackup/contentbackup/internal/transport"
)

type cli struct {
	Server string `default:"127.0.0.1:50051" env:"SERVER_ADDR" help:"Address of the contentbackup server, for every command that calls one (all but inspect, verify and rewrap)."`
	connFlags
	JSON     bool        `name:"json" help:"Print machine-readable JSON on stdout."`
	Export   exportCmd   `cmd:"" help:"Export an owner's archive from the server to a file."`
	Import   importCmd   `cmd:"" help:"Import an archive file into an owner's store on the server."`
	Inspect  inspectCmd  `cmd:"" help:"Print an archive's version and metadata (reads record 0 only; no server)."`
	Verify   verifyCmd   `cmd:"" help:"Read a whole archive and report what it holds and the first problem (no server)."`
	Rewrap   rewrapCmd   `cmd:"" help:"Rewrite an archive, legacy nonce form included, in the counter form under a new key (no server)."`
	Estimate estimateCmd `cmd:"" help:"What an export of the owner would hold and weigh now (counts and exact bytes), written nowhere: a dry run of export."`
	Jobs     jobsCmd     `cmd:"" help:"Start, follow and cancel server-side export and import jobs (object storage)."`
	Restore  restoreCmd  `cmd:"" help:"Restore a backup from the server's catalog into an owner, waiting for its import job: the snapshot it was taken from (an increment with its whole chain)."`
	Backups  backupsCmd  `cmd:"" help:"List, show, delete and fetch the key of an owner's backups in the server's catalog."`
	Owners   ownersCmd   `cmd:"" help:"Erase an owner everywhere (owners.erase), or see what an erasure would remove."`
	Holds    holdsCmd    `cmd:"" help:"Place, lift and list legal holds on an owner or its backups (owners.hold)."`
	Keys     keysCmd     `cmd:"" help:"The server's key hierarchy: which KEKs wrap the owner keys (a rotation's progress)."`
	Lint     lintCmd     `cmd:"" help:"List an owner's stored records that the reference client's import would refuse, with the repair an export would make."`
	// Shell completion is kongplete's (posener/complete under kong):
	// the completion command prints the line that hooks the binary into
	// the login shell, and the binary answers the shell's COMP_LINE.
	Completion kongplete.InstallCompletions `cmd:"" help:"Print the line that turns on tab completion in your login shell (bash, zsh or fish): add it to the shell's rc file."`
	Version    kong.VersionFlag             `help:"Print the version and exit."`
}

// buildVersion is set at build time: -ldflags "-X main.buildVersion=...".
var buildVersion string

// keyFlags: the key from a file, or hex in an environment variable.
type keyFlags struct {
	KeyFile string `name:"key-file" env:"ARCHIVE_KEY_FILE" help:"File holding the 32-byte archive key, raw or as 64 hex characters (a backup's: 'backups key'). Or set ARCHIVE_KEY to the hex."`
}

func (k keyFlags) key() ([]byte, error) {
	return loadKey(k.KeyFile, "ARCHIVE_KEY", "--key-file")
}

// openArchive loads the key and opens a local archive with its metadata
// read. close releases both.
func (k keyFlags) openArchive(path string) (r *archive.Reader, meta *ds.BackupMetadataSave, close func(), err error) {
	key, err := k.key()
	if err != nil {
		return nil, nil, nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, nil, err
	}
	if r, err = archive.NewReader(f, key, archive.ReaderOptions{}); err != nil {
		f.Close()
		return nil, nil, nil, err
	}
	close = func() { r.Close(); f.Close() }
	if meta, err = r.Metadata(); err != nil {
		close()
		return nil, nil, nil, err
	}
	return r, meta, close, nil
}

func loadKey(path, env, flag string) ([]byte, error) {
	if path == "" {
		hexKey := os.Getenv(env)
		if hexKey == "" {
			return nil, fmt.Errorf("no key: give %s or set %s", flag, env)
		}
		return parseKey([]byte(hexKey), env)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	return parseKey(b, path)
}

// parseKey is archive.ParseKey naming where the key came from.
func parseKey(b []byte, from string) ([]byte, error) {
	k, err := archive.ParseKey(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", from, err)
	}
	return k, nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var c cli
	parser, err := kong.New(&c, kong.Name("archivectl"), kong.Description("Export, import, inspect, verify and rewrap XMTP archives."),
		kong.BindTo(ctx, (*context.Context)(nil)),
		kong.Vars{"version": buildinfo.Version(buildVersion)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "archivectl:", err)
		os.Exit(1)
	}
	// A shell asking for completions (COMP_LINE set) is answered, and the
	// process ends there.
	kongplete.Complete(parser)
	kctx, err := parser.Parse(os.Args[1:])
	if err != nil {
		// One line: what was wrong and where the flags are listed, not
		// the whole usage before it (restic's way).
		var pe *kong.ParseError
		if errors.As(err, &pe) {
			kctx = pe.Context
		}
		fmt.Fprintln(os.Stderr, "archivectl:", parseError(err, kctx))
		os.Exit(2)
	}
	if err := kctx.Run(&c); err != nil {
		fmt.Fprintln(os.Stderr, "archivectl:", explain(err, &c, kctx.Command()))
		os.Exit(1)
	}
}

// dial connects to the server. The commands' Run methods get the context
// and the top-level flags from kong's bindings.
func (c *cli) dial() (*grpc.ClientConn, error) {
	opts, err := c.connFlags.dialOptions(c.Server)
	if err != nil {
		return nil, err
	}
	// An export streams the whole archive to us: windows and buffers for
	// that (transport.ArchiveDialOptions).
	opts = append(append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20))), transport.ArchiveDialOptions()...)
	// A call failing UNAVAILABLE while the store fails over is sent again.
	opts = append(opts, transport.WithRetries())
	conn, err := grpc.NewClient(c.Server, opts...)
	if err != nil {
		return nil, fmt.Errorf("server %s: %w", c.Server, err)
	}
	return conn, nil
}

// protoJSON is the one JSON form archivectl prints API messages in:
// protojson with the proto field names (snake_case, as archivectl's own
// objects), every field present (an empty list is [], never missing), and
// protojson's own rules otherwise (64-bit integers as strings), but for
// digests.
//
// One convention for every --json output: protobuf's field names, every
// field present (empty lists as []), and digests (a "sha256" field) in
// lowercase hex, as sha256sum prints them and the text output shows them,
// not in the base64 protobuf's JSON gives bytes.
func protoJSON(m proto.Message) ([]byte, error) {
	b, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return nil, err
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	if !hexDigests(v) {
		return b, nil
	}
	return json.Marshal(v)
}

// hexDigests rewrites every "sha256" string of v, base64, as hex, and
// reports whether it found one.
func hexDigests(v any) bool {
	found := false
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if s, ok := x.(string); ok && k == "sha256" {
				if raw, err := base64.StdEncoding.DecodeString(s); err == nil {
					t[k] = hex.EncodeToString(raw)
					found = true
				}
				continue
			}
			found = hexDigests(x) || found
		}
	case []any:
		for _, x := range t {
			found = hexDigests(x) || found
		}
	}
	return found
}

// output prints v as JSON with --json, else text.
func (c *cli) output(v any, text string) error {
	if !c.JSON {
		fmt.Print(text)
		return nil
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// metadataJSON renders a metadata element with protojson's field names.
func metadataJSON(m *ds.BackupMetadataSave) json.RawMessage {
	if m == nil {
		return json.RawMessage("null")
	}
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return json.RawMessage("null")
	}
	return b
}

func metadataText(m *ds.BackupMetadataSave) string {
	var sel []string
	for _, e := range m.GetElements() {
		sel = append(sel, strings.TrimPrefix(e.String(), "BACKUP_ELEMENT_SELECTION_"))
	}
	window := "none"
	if m.StartNs != nil || m.EndNs != nil {
		window = fmt.Sprintf("(%s, %s]", optNs(m.StartNs), optNs(m.EndNs))
	}
	return fmt.Sprintf("selection:   %s\nwindow:      %s\nexported at: %s (%d ns)\n",
		strings.Join(sel, ", "), window, time.Unix(0, m.GetExportedAtNs()).UTC().Format(time.RFC3339Nano), m.GetExportedAtNs())
}

func optNs(v *int64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprint(*v)
}

// progress reports a long transfer on stderr, at most once a second:
// bytes and rate, and with a known total (an import's file) the share
// done and the time left at the rate so far.
type progress struct {
	verb        string
	total       uint64 // 0: unknown
	start, last time.Time
	bytes       uint64
}

func newProgress(verb string, total uint64) *progress {
	now := time.Now()
	return &progress{verb: verb, total: total, start: now, last: now}
}

func (p *progress) add(n int) {
	p.bytes += uint64(n)
	if time.Since(p.last) >= time.Second {
		p.last = time.Now()
		fmt.Fprintln(os.Stderr, p.line(time.Since(p.start)))
	}
}

// line is the report after elapsed: no rate before a whole second has
// gone (a rate over the first milliseconds reads as terabytes a second).
func (p *progress) line(elapsed time.Duration) string {
	mib := float64(p.bytes) / (1 << 20)
	line := fmt.Sprintf("%s %.1f MiB", p.verb, mib)
	if p.total > 0 {
		line = fmt.Sprintf("%s %.1f of %.1f MiB (%.0f%%)", p.verb, mib, float64(p.total)/(1<<20), 100*float64(p.bytes)/float64(p.total))
	}
	if elapsed < time.Second || p.bytes == 0 {
		return line
	}
	rate := float64(p.bytes) / elapsed.Seconds()
	line += fmt.Sprintf(", %.1f MiB/s", rate/(1<<20))
	if p.total > p.bytes {
		left := time.Duration(float64(p.total-p.bytes) / rate * float64(time.Second))
		line += ", about " + left.Round(time.Second).String() + " left"
	}
	return line
}

type exportCmd struct {
	keyFlags
	Owner  string `required:"" help:"Owner (inbox) whose records to export."`
	Output string `short:"o" required:"" type:"path" help:"Archive file to write; written to a temporary file and put in place only once complete."`
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
		return c.output(map[string]uint64{"groups": sum.GetGroups(), "messages": sum.GetMessages(), "consent": sum.GetConsentRecords(),
			"bytes": sum.GetArchiveBytes(), "excluded": sum.GetExcludedRecords(), "repaired": sum.GetRepairedRecords()}, "")
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
	return c.output(map[string]any{
		"file": e.Output, "groups": summary.GetGroups(), "messages": summary.GetMessages(), "consent_records": summary.GetConsentRecords(),
		"archive_bytes": summary.GetArchiveBytes(), "sha256": hex.EncodeToString(summary.GetSha256()), "exported_at_ns": summary.GetExportedAtNs(),
		"excluded_records": summary.GetExcludedRecords(), "repaired_records": summary.GetRepairedRecords(),
	}, fmt.Sprintf("wrote %s: %d groups, %d messages, %d consent records, %d bytes, sha256 %x%s\n",
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

type importCmd struct {
	keyFlags
	Owner string `required:"" help:"Owner (inbox) to import into."`
	File  string `arg:"" type:"existingfile" help:"Archive file."`
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
	File string `arg:"" type:"existingfile" help:"Archive file."`
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
	NewKeyFile string `name:"new-key-file" env:"NEW_ARCHIVE_KEY_FILE" help:"File holding the new key, raw or hex. Or set NEW_ARCHIVE_KEY to the hex."`
	Output     string `short:"o" required:"" type:"path" help:"Archive file to write (through a temporary file)."`
	Force      bool   `help:"Replace --output if it exists."`
	File       string `arg:"" type:"existingfile" help:"Archive file to read."`
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
