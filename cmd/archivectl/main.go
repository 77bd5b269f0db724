// Command archivectl is the operator's CLI for archives: export and import
// through a running server, and inspect, verify and rewrap local files
// without one.
//
// Keys come from a file (32 raw bytes or 64 hex characters) or an
// environment variable, never from a flag value that would show in ps, and
// are never printed.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/alecthomas/kong"
	"github.com/willabides/kongplete"
	"google.golang.org/grpc"

	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
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
	// the completion command prints the code that hooks the binary into
	// a shell, and the binary answers the shell's COMP_LINE (completion.go).
	Completion completionCmd    `cmd:"" help:"Print the code that turns on tab completion in bash, zsh or fish (add it to the shell's rc file): commands and flags, archive and key files, backup ids and operation names from the server."`
	Version    kong.VersionFlag `help:"Print the version and exit."`
}

// buildVersion is set at build time: -ldflags "-X main.buildVersion=...".
var buildVersion string

// keyFlags: the key from a file, or hex in an environment variable.
type keyFlags struct {
	KeyFile string `name:"key-file" env:"ARCHIVE_KEY_FILE" predictor:"file" help:"File holding the 32-byte archive key, raw or as 64 hex characters (a backup's: 'backups key'). Or set ARCHIVE_KEY to the hex."`
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

// newParser is archivectl's command line, parsed into c.
func newParser(ctx context.Context, c *cli) (*kong.Kong, error) {
	return kong.New(c, kong.Name("archivectl"), kong.Description("The contentbackup operator's tool: XMTP archives (export, import, estimate, inspect, verify, rewrap), backup jobs and restores, backups and their holds, owners' erasure, and keys."),
		kong.BindTo(ctx, (*context.Context)(nil)),
		kong.Vars{"version": buildinfo.Version(buildVersion)})
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var c cli
	parser, err := newParser(ctx, &c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "archivectl:", err)
		os.Exit(1)
	}
	// A shell asking for completions (COMP_LINE set) is answered, and the
	// process ends there.
	kongplete.Complete(parser, predictors(&c)...)
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
		if c.JSON {
			// One JSON convention: with --json, the error is an object
			// too, on stderr.
			b, _ := json.Marshal(map[string]failure{"error": explained(err, &c, kctx.Command())})
			fmt.Fprintln(os.Stderr, string(b))
		} else {
			fmt.Fprintln(os.Stderr, "archivectl:", explain(err, &c, kctx.Command()))
		}
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
