package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/posener/complete"
	"github.com/willabides/kongplete"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
)

// completionCmd prints the shell code that hands archivectl's tab
// completion to archivectl (posener/complete under kong, as kongplete
// wires it): the shell runs the binary with COMP_LINE set, and main
// answers before parsing.
type completionCmd struct {
	Shell string `arg:"" enum:"bash,zsh,fish" help:"The shell: bash, zsh or fish."`
}

// completionScripts hook a binary at ${bin} into each shell.
var completionScripts = map[string]string{
	"bash": "complete -C ${bin} archivectl\n",
	"zsh":  "autoload -U +X bashcompinit && bashcompinit\ncomplete -C ${bin} archivectl\n",
	"fish": `function __complete_archivectl
    set -lx COMP_LINE (commandline -cp)
    test -z (commandline -ct)
    and set COMP_LINE "$COMP_LINE "
    ${bin}
end
complete -f -c archivectl -a "(__complete_archivectl)"
`,
}

func (c *completionCmd) Run() error {
	bin, err := stableBinary()
	if err != nil {
		return err
	}
	fmt.Print(os.Expand(completionScripts[c.Shell], func(v string) string {
		if v == "bin" {
			return bin
		}
		return "$" + v
	}))
	return nil
}

// stableBinary is the path the shell should run for completions: this
// binary, unless it is go run's, which lives in a build cache that goes
// away; then the archivectl on PATH, or an error saying how to get one.
func stableBinary() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	if self, err = filepath.EvalSymlinks(self); err != nil {
		return "", err
	}
	if !strings.Contains(self, string(filepath.Separator)+"go-build") {
		return self, nil
	}
	if onPath, err := exec.LookPath("archivectl"); err == nil {
		return filepath.Abs(onPath)
	}
	return "", errors.New("this archivectl runs from go run's build cache, which does not last: build one (make build writes bin/archivectl), put it on PATH, and run its completion")
}

// completionTimeout bounds what a completion asks the server: a shell
// waits for it.
const completionTimeout = 2 * time.Second

// predictors complete archive and key files, and backup ids and operation
// names from the server (within completionTimeout, nothing on failure).
func predictors(c *cli) []kongplete.Option {
	return []kongplete.Option{kongplete.WithPredictors(map[string]complete.Predictor{
		"file":      complete.PredictFiles("*"),
		"backup":    complete.PredictFunc(func(a complete.Args) []string { return serverNames(c, a, backupIDs) }),
		"operation": complete.PredictFunc(func(a complete.Args) []string { return serverNames(c, a, operationNames) }),
	})}
}

// serverNames asks the server for names to complete with, as the command
// line's flags say to reach it (--server, the token's environment).
func serverNames(c *cli, a complete.Args, list func(context.Context, *cli, string) ([]string, error)) []string {
	// Completion runs before the command line is parsed: the server
	// comes from it, the environment, or the default.
	server, owner := os.Getenv("SERVER_ADDR"), ""
	if server == "" {
		server = "127.0.0.1:50051"
	}
	for i, w := range a.All {
		next := ""
		if i+1 < len(a.All) {
			next = a.All[i+1]
		}
		switch {
		case w == "--server":
			server = next
		case strings.HasPrefix(w, "--server="):
			server = strings.TrimPrefix(w, "--server=")
		case w == "--owner":
			owner = next
		case strings.HasPrefix(w, "--owner="):
			owner = strings.TrimPrefix(w, "--owner=")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
	defer cancel()
	cc := *c
	cc.Server = server
	names, err := list(ctx, &cc, owner)
	if err != nil {
		return nil
	}
	return names
}

func backupIDs(ctx context.Context, c *cli, owner string) ([]string, error) {
	if owner == "" {
		return nil, errors.New("no --owner yet")
	}
	conn, err := c.dial()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	resp, err := cb.NewBackupServiceClient(conn).ListBackups(ctx, &cb.ListBackupsRequest{Owner: owner})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, b := range resp.GetBackups() {
		out = append(out, b.GetId())
	}
	return out, nil
}

func operationNames(ctx context.Context, c *cli, _ string) ([]string, error) {
	conn, err := c.dial()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	resp, err := longrunningpb.NewOperationsClient(conn).ListOperations(ctx, &longrunningpb.ListOperationsRequest{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, op := range resp.GetOperations() {
		out = append(out, op.GetName())
	}
	return out, nil
}
