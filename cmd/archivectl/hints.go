package main

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/alecthomas/kong"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/contentbackup/contentbackup/internal/archive"
	"github.com/contentbackup/contentbackup/internal/fault"
	"github.com/contentbackup/contentbackup/internal/server/authz"
)

// mistake is a common mistake an error shows: match tells it from the
// error and what the command was given; hint says what to do.
type mistake struct {
	match func(err error, c *cli, command string) bool
	hint  func(err error, c *cli) string
}

func codeOf(err error) codes.Code {
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		return se.GRPCStatus().Code()
	}
	return codes.Unknown
}

// reasonOf is the reason the server gave err (its google.rpc.ErrorInfo)
// and the metadata with it; "" for an error that carries none. Hints
// read reasons and metadata, never the server's prose, which may change.
func reasonOf(err error) (fault.Reason, map[string]string) {
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return "", nil
	}
	for _, d := range se.GRPCStatus().Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == authz.ErrorDomain {
			return fault.Reason(info.GetReason()), info.GetMetadata()
		}
	}
	return "", nil
}

// versionOf is the container version an archive was refused for, and the
// one the reader knows: from the server's metadata, or from a local
// read's error.
func versionOf(err error) (version, supported string, ok bool) {
	if r, md := reasonOf(err); r == fault.ReasonUnsupportedVersion && md["version"] != "" {
		return md["version"], md["supported"], true
	}
	var ve *archive.VersionError
	if errors.As(err, &ve) {
		return strconv.Itoa(int(ve.Version)), strconv.Itoa(archive.Version), true
	}
	return "", "", false
}

// mistakes are the ones new users make most (issue 36), each with the
// hint restic or pgBackRest would give: what is wrong, and what to do.
var mistakes = []mistake{
	{ // no credentials, or the wrong ones
		match: func(err error, _ *cli, _ string) bool { return codeOf(err) == codes.Unauthenticated },
		hint: func(_ error, c *cli) string {
			if c.TokenFile == "" && os.Getenv("CONTENTBACKUP_TOKEN") == "" && c.TLSCert == "" {
				return "no credentials were sent: set CONTENTBACKUP_TOKEN or --token-file, or give a client certificate with --tls-cert and --tls-key; a development server writes its token to <data-dir>/dev-token"
			}
			return "the server did not accept these credentials: check the token (or certificate) against its auth policy"
		},
	},
	{ // nothing answers at the address, or the name does not resolve
		match: func(err error, _ *cli, _ string) bool {
			msg := err.Error()
			return codeOf(err) == codes.Unavailable && (strings.Contains(msg, "connection refused") ||
				strings.Contains(msg, "produced zero addresses") || strings.Contains(msg, "no such host"))
		},
		hint: func(_ error, c *cli) string {
			return "nothing answers at " + c.Server + " (tried for a few seconds, as a failover heals): is the server running there? --server or SERVER_ADDR names it"
		},
	},
	{ // a TLS server whose certificate this tool does not trust
		match: func(err error, _ *cli, _ string) bool {
			msg := err.Error()
			return strings.Contains(msg, "certificate signed by unknown authority") || strings.Contains(msg, "certificate is not valid for") ||
				strings.Contains(msg, "x509: certificate")
		},
		hint: func(_ error, c *cli) string {
			return "the certificate " + c.Server + " presented is not one this tool trusts: pass --tls-ca with the CA that signed it (and --tls-server-name if it names another host)"
		},
	},
	{ // a plaintext call to a TLS server
		match: func(err error, _ *cli, _ string) bool {
			msg := err.Error()
			return codeOf(err) == codes.Unavailable && (strings.Contains(msg, errNoPreface.Error()) ||
				strings.Contains(msg, "error reading server preface") ||
				strings.Contains(msg, "connection closed before server preface received"))
		},
		hint: func(error, *cli) string {
			return "the server did not answer plaintext gRPC: if it serves TLS, pass --tls-ca with the CA that signed its certificate"
		},
	},
	{ // a TLS call to a plaintext server
		match: func(err error, _ *cli, _ string) bool {
			return strings.Contains(err.Error(), "first record does not look like a TLS handshake")
		},
		hint: func(error, *cli) string {
			return "the server answered in plaintext: drop the --tls-* flags, or pass --plaintext"
		},
	},
	{ // the wrong key
		match: func(err error, _ *cli, _ string) bool {
			r, _ := reasonOf(err)
			return r == fault.ReasonAuthenticationFailed || errors.Is(err, archive.ErrAuthentication)
		},
		hint: func(error, *cli) string {
			return "wrong key? an archive opens only under the key it was exported with, given by --key-file; a backup job's key comes from archivectl backups key"
		},
	},
	{ // a file that is not an archive
		match: func(err error, _ *cli, _ string) bool {
			// A version past 99 is no archive's: its first two bytes are
			// text.
			v, _, ok := versionOf(err)
			return ok && len(v) > 2
		},
		hint: func(err error, _ *cli) string {
			v, supported, _ := versionOf(err)
			return "is this file an archive? its first two bytes read as version " + v + "; this tool reads versions up to " + supported
		},
	},
	{ // another owner's backup, restored without --source-owner
		match: func(err error, c *cli, command string) bool {
			r, _ := reasonOf(err)
			notFound := r == fault.ReasonBackupNotFound || errors.Is(err, errNoBackupPrefix)
			return notFound && strings.HasPrefix(command, "restore") && c.Restore.SourceOwner == ""
		},
		hint: func(_ error, c *cli) string {
			return "if the backup is another owner's, name that owner with --source-owner; restoring it into " + c.Restore.Owner + " needs the scope archive.migrate"
		},
	},
	{ // an import that stopped part-way
		match: func(err error, _ *cli, _ string) bool {
			_, md := reasonOf(err)
			return md["record"] != ""
		},
		hint: func(err error, _ *cli) string {
			_, md := reasonOf(err)
			n := md["record"]
			return "every record before record " + n + " is applied and none from it on; once the archive is whole, the same import again applies the rest and leaves what is there as it is"
		},
	},
}

// explain is the one line archivectl prints for err: the error, then the
// hint of the mistake it shows, if any.
func explain(err error, c *cli, command string) string {
	e := explained(err, c, command)
	if e.Hint == "" {
		return e.Message
	}
	return fmt.Sprintf("%s (hint: %s)", e.Message, e.Hint)
}

// failure is an error as archivectl reports it; with --json it is printed
// as this object on stderr, one line.
type failure struct {
	// Code is the gRPC code's name ("Unavailable"), empty for an error
	// of the tool's own (a file it cannot read).
	Code string `json:"code"`
	// Reason is the server's ErrorInfo reason, when it gave one.
	Reason  string `json:"reason"`
	Message string `json:"message"`
	Hint    string `json:"hint"`
}

func explained(err error, c *cli, command string) failure {
	// grpc-go's "rpc error: code = X desc = " says the code in its own
	// words: the code's name and the server's message read better.
	f := failure{Message: rpcError.ReplaceAllString(err.Error(), "$1: ")}
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		f.Code = se.GRPCStatus().Code().String()
	}
	r, _ := reasonOf(err)
	f.Reason = string(r)
	for _, m := range mistakes {
		if m.match(err, c, command) {
			f.Hint = m.hint(err, c)
			break
		}
	}
	return f
}

var rpcError = regexp.MustCompile(`rpc error: code = (\w+) desc = `)

// parseError is the line for a command line kong could not parse: the
// error and where the flags are listed, without the usage before it.
func parseError(err error, kctx *kong.Context) string {
	cmd := "archivectl"
	if kctx != nil && kctx.Command() != "" {
		// Only the command's words, not its positional arguments.
		var words []string
		for _, w := range strings.Fields(kctx.Command()) {
			if !strings.HasPrefix(w, "<") {
				words = append(words, w)
			}
		}
		cmd = "archivectl " + strings.Join(words, " ")
	}
	return fmt.Sprintf("%s (%s --help lists the flags)", err, cmd)
}
