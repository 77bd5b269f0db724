package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"

	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/devpki"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
	"github.com/contentbackup/contentbackup/internal/transport"
)

// transcriptLines are the archivectl lines of docs/archivectl-errors.md,
// in order: each mistake's one-line error, as the tool prints it.
func transcriptLines(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../docs/archivectl-errors.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "archivectl: ") {
			out = append(out, line)
		}
	}
	return out
}

// TestArchivectlMistakes: each common mistake of issue 36, made over TCP
// against a real server (and one with a TLS server), prints the one line
// docs/archivectl-errors.md shows for it: the error and what to do.
// Paths, addresses and ids vary from run to run and are written there as
// DIR, ADDR and ID; record numbers and sizes as N and M, and the
// transport's words for a refused handshake as "…".
func TestArchivectlMistakes(t *testing.T) {
	bin := build(t)
	addr, s, _ := serveJobs(t, nil)
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key := write("backup.key", bytes.Repeat([]byte{7}, 32))
	wrong := write("wrong.key", bytes.Repeat([]byte{8}, 32))
	owner, bob := storetest.Owner("alice"), storetest.Owner("bob")
	g := storetest.FullGroup("g")
	if _, err := s.PutGroup(t.Context(), owner, g); err != nil {
		t.Fatal(err)
	}
	// Enough messages that a cut near the end falls after records that
	// import.
	var msgs []*mb.GroupMessageSave
	for i := range 200 {
		m := storetest.Message(fmt.Sprint("m", i), g.GetId(), int64(i+1))
		m.DecryptedMessageBytes = bytes.Repeat([]byte{byte(i)}, 1000)
		msgs = append(msgs, m)
	}
	if _, err := s.AppendMessages(t.Context(), owner, msgs, store.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	ctl := tool{t: t, bin: bin, env: []string{"SERVER_ADDR=" + addr, "CONTENTBACKUP_TOKEN=" + ctlToken}}
	anon := tool{t: t, bin: bin, env: []string{"SERVER_ADDR=" + addr, "CONTENTBACKUP_TOKEN="}}
	archive := filepath.Join(dir, "alice.xmtp")
	if _, stderr, err := ctl.run("export", "--owner", owner, "--key-file", key, "--output", archive); err != nil {
		t.Fatalf("export: %v\n%s", err, stderr)
	}
	whole, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	truncated := write("truncated.xmtp", whole[:len(whole)*2/3])
	notArchive := write("README.md", []byte("# contentbackup\n\nA gRPC service.\n"))
	out, stderr, err := ctl.run("jobs", "start-export", "--owner", owner, "--label", "for restore", "--wait")
	if err != nil {
		t.Fatalf("jobs start-export: %v\n%s%s", err, out, stderr)
	}
	out, _, _ = ctl.run("backups", "list", "--owner", owner)
	backupID := strings.Fields(strings.Split(out, "\n")[1])[0]

	// A TLS server, called as if it were plaintext.
	ca, err := devpki.NewCA("mistakes CA")
	if err != nil {
		t.Fatal(err)
	}
	sc, sk, err := ca.Issue(devpki.Leaf{CommonName: "localhost", DNSNames: []string{"localhost"}})
	if err != nil {
		t.Fatal(err)
	}
	creds, stop, err := transport.ServerCredentials(t.Context(), transport.ServerFiles{CertFile: write("server.crt", sc), KeyFile: write("server.key", sk)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	tlsAddr, _ := serve(t, credentials.TransportCredentials(creds))
	// An address nothing answers at.
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nobody := closed.Addr().String()
	closed.Close()

	cases := []struct {
		name string
		tool tool
		args []string
	}{
		{"a mistyped flag", ctl, []string{"export", "--ownr", owner}},
		{"no token", anon, []string{"export", "--owner", owner, "--key-file", key, "--output", filepath.Join(dir, "a.xmtp")}},
		{"a TLS server called in plaintext", ctl, []string{"--server", tlsAddr, "estimate", "--owner", owner}},
		{"the wrong key", ctl, []string{"import", "--owner", owner, "--key-file", wrong, archive}},
		{"a file that is not an archive", ctl, []string{"import", "--owner", owner, "--key-file", key, notArchive}},
		{"a truncated archive", ctl, []string{"import", "--owner", owner, "--key-file", key, truncated}},
		{"another owner's backup without --source-owner", ctl, []string{"restore", "--owner", bob, backupID}},
		{"no server at the address", ctl, []string{"--server", nobody, "estimate", "--owner", owner}},
		{"a TLS server whose CA is not given", ctl, []string{"--server", tlsAddr, "--tls-server-name", "localhost", "estimate", "--owner", owner}},
	}
	want := transcriptLines(t)
	if len(want) != len(cases) {
		t.Errorf("docs/archivectl-errors.md shows %d lines, the test makes %d mistakes", len(want), len(cases))
	}
	ids := regexp.MustCompile(`\b[0-9a-f]{32}\b`)
	for i, c := range cases {
		_, stderr, err := c.tool.run(c.args...)
		if err == nil {
			t.Errorf("%s: archivectl succeeded", c.name)
			continue
		}
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		got := lines[len(lines)-1]
		got = strings.NewReplacer(dir, "DIR", tlsAddr, "ADDR", addr, "ADDR", nobody, "ADDR", owner, "alice", bob, "bob").Replace(got)
		got = ids.ReplaceAllString(got, "ID")
		// What varies with the run and the machine's load: the archive's
		// bytes (its owners' names are random), and the transport's own
		// words for a refused handshake.
		for re, with := range map[*regexp.Regexp]string{
			regexp.MustCompile(`record \d+`):                       "record N",
			regexp.MustCompile(`\(\d+ of \d+ bytes\)`):             "(N of M bytes)",
			regexp.MustCompile(`failed after \d+ attempts`):        "failed after N attempts",
			regexp.MustCompile(`connection error: desc = "[^"]*"`): `connection error: desc = "…"`,
		} {
			got = re.ReplaceAllString(got, with)
		}
		// Where the cut falls (inside a record's ciphertext, its prefix, a
		// compressed block) changes the reader's words, not the mistake.
		for re, with := range map[*regexp.Regexp]string{
			regexp.MustCompile(`archive: truncated: .*? \(hint:`): "archive: truncated: … (hint:",
		} {
			got = re.ReplaceAllString(got, with)
		}
		if len(lines) != 1 {
			t.Errorf("%s: %d lines on stderr, want one:\n%s", c.name, len(lines), stderr)
		}
		switch {
		case i >= len(want):
			t.Errorf("%s: docs/archivectl-errors.md has no line for it; the tool prints:\n%s", c.name, got)
		case got != want[i]:
			t.Errorf("%s:\n got: %s\nwant: %s", c.name, got, want[i])
		}
	}
}

// TestArchivectlDryRunSaysSo: an import with --validate-only reads as a
// dry run, with what an import would do, never as an import that
// happened ("import succeeded … inserted 2", issue 36).
func TestArchivectlDryRunSaysSo(t *testing.T) {
	bin := build(t)
	addr, s, _ := serveJobs(t, nil)
	ctl := tool{t: t, bin: bin, env: []string{"SERVER_ADDR=" + addr, "CONTENTBACKUP_TOKEN=" + ctlToken}}
	owner := storetest.Owner("dry")
	g := storetest.FullGroup("g")
	if _, err := s.PutGroup(t.Context(), owner, g); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendMessages(t.Context(), owner, []*mb.GroupMessageSave{storetest.Message("m1", g.GetId(), 1), storetest.Message("m2", g.GetId(), 2)}, store.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, stderr, err := ctl.run("jobs", "start-export", "--owner", owner, "--wait"); err != nil {
		t.Fatalf("export: %v\n%s%s", err, out, stderr)
	}
	out, _, _ := ctl.run("backups", "list", "--owner", owner)
	id := strings.Fields(strings.Split(out, "\n")[1])[0]
	into := storetest.Owner("into")
	out, stderr, err := ctl.run("jobs", "start-import", "--owner", into, "--source-owner", owner, "--backup", id, "--validate-only", "--wait")
	if err != nil {
		t.Fatalf("dry run: %v\n%s%s", err, out, stderr)
	}
	if !strings.Contains(out, "dry-run import") || !strings.Contains(out, "nothing applied; an import would insert 1 groups, 2 messages") {
		t.Errorf("a dry run's output does not say it is one:\n%s", out)
	}
	if strings.Contains(out, " import  succeeded") {
		t.Errorf("a dry run reads as an import that happened:\n%s", out)
	}
}

// TestArchivectlExportKeepsAnExistingFile: export -o refuses a file that
// exists before it starts, and leaves it as it was; --force replaces it
// (issue 36: it was overwritten silently).
func TestArchivectlExportKeepsAnExistingFile(t *testing.T) {
	ctl, owner, _, _ := operatorAndOwner(t, "keep", false)
	dir := t.TempDir()
	key := keyFileIn(t, dir)
	out := filepath.Join(dir, "precious.xmtp")
	if err := os.WriteFile(out, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, err := ctl.run("export", "--owner", owner, "--key-file", key, "-o", out)
	if got, _ := os.ReadFile(out); err == nil || !strings.Contains(stderr, "exists; --force replaces it") || string(got) != "precious" {
		t.Errorf("export over an existing file: %v %q; the file now holds %d bytes", err, stderr, len(got))
	}
	if _, stderr, err := ctl.run("export", "--owner", owner, "--key-file", key, "-o", out, "--force"); err != nil {
		t.Fatalf("export --force: %v %s", err, stderr)
	}
	if got, _ := os.ReadFile(out); string(got) == "precious" {
		t.Errorf("export --force left the file as it was")
	}
}

// TestArchivectlShortBackupIDs: a unique prefix of a backup id (4 hex
// digits or more) names it, as git's do; one that is too short, matches
// none or matches two is refused, saying which.
func TestArchivectlShortBackupIDs(t *testing.T) {
	ctl, owner, _, _ := operatorAndOwner(t, "short", true)
	var ids []string
	for range 2 {
		if out, stderr, err := ctl.run("jobs", "start-export", "--owner", owner, "--wait"); err != nil {
			t.Fatalf("export: %v\n%s%s", err, out, stderr)
		}
	}
	out, _, _ := ctl.run("backups", "list", "--owner", owner)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		ids = append(ids, strings.Fields(line)[0])
	}
	if len(ids) != 2 {
		t.Fatalf("backups list: %s", out)
	}
	// The shortest prefix that tells the first from the second.
	n := minPrefix
	for ids[0][:n] == ids[1][:n] {
		n++
	}
	if out, stderr, err := ctl.run("--json", "backups", "show", "--owner", owner, ids[0][:n]); err != nil || !strings.Contains(out, ids[0]) {
		t.Errorf("backups show %s: %v %s %s", ids[0][:n], err, out, stderr)
	}
	if out, stderr, err := ctl.run("jobs", "start-import", "--owner", owner, "--backup", ids[1][:n], "--validate-only", "--wait"); err != nil || !strings.Contains(out, "dry-run import") {
		t.Errorf("jobs start-import --backup %s: %v %s %s", ids[1][:n], err, out, stderr)
	}
	for prefix, want := range map[string]string{
		"abc":        "give at least 4 of its 32 hex digits",
		"ffffffffff": "no backup of " + owner + " has an id starting ffffffffff",
	} {
		if _, stderr, err := ctl.run("backups", "show", "--owner", owner, prefix); err == nil || !strings.Contains(stderr, want) {
			t.Errorf("backups show %s: %v %q; want %q", prefix, err, stderr, want)
		}
	}
	if ids[0][:minPrefix] == ids[1][:minPrefix] {
		if _, stderr, err := ctl.run("backups", "show", "--owner", owner, ids[0][:minPrefix]); err == nil || !strings.Contains(stderr, "ambiguous") {
			t.Errorf("an ambiguous prefix: %v %q", err, stderr)
		}
	}
}

// TestArchivectlCompletion: the binary answers a shell's completion
// request (COMP_LINE), and `completion` prints the line that hooks it
// into the login shell (issue 36: "completion" was an unexpected
// argument).
func TestArchivectlCompletion(t *testing.T) {
	bin := build(t)
	for line, want := range map[string]string{
		"archivectl bac":            "backups",
		"archivectl backups l":      "list",
		"archivectl export --own":   "--owner",
		"archivectl jobs start-imp": "start-import",
	} {
		out, stderr, err := tool{t: t, bin: bin, env: []string{"COMP_LINE=" + line}}.run()
		if err != nil || strings.TrimSpace(out) != want {
			t.Errorf("completing %q: %q %v %s; want %q", line, out, err, stderr, want)
		}
	}
	// completion takes the shell, and names this binary's own path.
	for shell, want := range map[string]string{"bash": "complete -C " + bin + " archivectl", "zsh": "bashcompinit", "fish": "complete -f -c archivectl"} {
		out, stderr, err := tool{t: t, bin: bin}.run("completion", shell)
		if err != nil || !strings.Contains(out, want) || !strings.Contains(out, bin) {
			t.Errorf("archivectl completion %s: %q %v %s; want %q", shell, out, err, stderr, want)
		}
	}
	if _, stderr, err := (tool{t: t, bin: bin}).run("completion", "tcsh"); err == nil || !strings.Contains(stderr, `"bash","zsh","fish"`) {
		t.Errorf("completion for a shell it does not serve: %v %s", err, stderr)
	}

	// Files for archive and key arguments; backup ids and operation names
	// from the server, as the command line and environment reach it.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "alice.xmtp"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, s, _ := serveJobs(t, nil)
	owner := storetest.Owner("complete")
	if _, err := s.PutGroup(t.Context(), owner, storetest.FullGroup("g")); err != nil {
		t.Fatal(err)
	}
	ctl := tool{t: t, bin: bin, env: []string{"SERVER_ADDR=" + addr, "CONTENTBACKUP_TOKEN=" + ctlToken}}
	if out, stderr, err := ctl.run("jobs", "start-export", "--owner", owner, "--wait"); err != nil {
		t.Fatalf("export: %v\n%s%s", err, out, stderr)
	}
	out, _, _ := ctl.run("backups", "list", "--owner", owner)
	backupID := strings.Fields(strings.Split(out, "\n")[1])[0]
	ops, _, _ := ctl.run("jobs", "list")
	for line, want := range map[string]string{
		"archivectl verify " + dir + "/al":               dir + "/alice.xmtp",
		"archivectl backups show --owner " + owner + " ": backupID,
		"archivectl restore --owner x --source-owner y ": "",
		"archivectl jobs get operations/" + backupID[:0]: "operations/",
	} {
		env := append(slices.Clone(ctl.env), "COMP_LINE="+line)
		got, stderr, err := tool{t: t, bin: bin, env: env}.run()
		if err != nil || want != "" && !strings.Contains(got, want) {
			t.Errorf("completing %q: %q %v %s; want %q (jobs list: %s)", line, got, err, stderr, want, ops)
		}
	}
	// A server that does not answer completes nothing (its ask is
	// bounded by completionTimeout).
	got, _, err := tool{t: t, bin: bin, env: []string{"SERVER_ADDR=10.255.255.1:9", "COMP_LINE=archivectl backups show --owner alice "}}.run()
	if err != nil || strings.TrimSpace(got) != "" {
		t.Errorf("completing from an unreachable server: %q %v", got, err)
	}
}

// TestArchivectlHumanTimes: --start and --end take RFC 3339, a date or an
// age back from now, and the archive's window is what they said (issue
// 36: nanoseconds only).
func TestArchivectlHumanTimes(t *testing.T) {
	ctl, owner, _, _ := operatorAndOwner(t, "times", false)
	dir := t.TempDir()
	key := keyFileIn(t, dir)
	out := filepath.Join(dir, "window.xmtp")
	before := time.Now()
	if _, stderr, err := ctl.run("export", "--owner", owner, "--key-file", key, "-o", out, "--start", "30d", "--end", "2030-01-02T00:00:00Z"); err != nil {
		t.Fatalf("export --start 30d --end …: %v %s", err, stderr)
	}
	js, stderr, err := ctl.run("--json", "inspect", "--key-file", key, out)
	if err != nil {
		t.Fatalf("inspect: %v %s", err, stderr)
	}
	var got struct {
		Metadata struct {
			StartNs string `json:"start_ns"`
			EndNs   string `json:"end_ns"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal([]byte(js), &got); err != nil {
		t.Fatalf("inspect --json: %v\n%s", err, js)
	}
	start, _ := strconv.ParseInt(got.Metadata.StartNs, 10, 64)
	wantStart := before.Add(-30 * 24 * time.Hour)
	if d := time.Unix(0, start).Sub(wantStart); d < -time.Minute || d > time.Minute {
		t.Errorf("the window starts at %s; --start 30d said about %s", time.Unix(0, start).UTC(), wantStart.UTC())
	}
	if got.Metadata.EndNs != fmt.Sprint(time.Date(2030, 1, 2, 0, 0, 0, 0, time.UTC).UnixNano()) {
		t.Errorf("the window ends at %s ns; --end said 2030-01-02T00:00:00Z", got.Metadata.EndNs)
	}
}

// TestArchivectlBackupsVerify: backups verify reads a backup back on
// demand: sound, then, after its object is damaged, not sound with the
// problem and a non-zero exit (issue 36).
func TestArchivectlBackupsVerify(t *testing.T) {
	ctl, owner, _, bucketDir := operatorAndOwner(t, "verify", true)
	if out, stderr, err := ctl.run("jobs", "start-export", "--owner", owner, "--wait"); err != nil {
		t.Fatalf("export: %v\n%s%s", err, out, stderr)
	}
	list, _, _ := ctl.run("backups", "list", "--owner", owner)
	id := strings.Fields(strings.Split(list, "\n")[1])[0]
	if out, stderr, err := ctl.run("backups", "verify", "--owner", owner, id[:8]); err != nil || !strings.Contains(out, "is sound") {
		t.Fatalf("backups verify of a sound backup: %v %q %q", err, out, stderr)
	}
	var object string
	_ = filepath.WalkDir(bucketDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".xmtpbak") {
			object = p
		}
		return err
	})
	data, err := os.ReadFile(object)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-10] ^= 0xff
	if err := os.WriteFile(object, data, 0o600); err != nil {
		t.Fatal(err)
	}
	out, stderr, err := ctl.run("backups", "verify", "--owner", owner, id)
	if err == nil || !strings.Contains(out, "is NOT sound") || !strings.Contains(stderr, "failed verification") {
		t.Errorf("backups verify of a damaged backup: %v %q %q", err, out, stderr)
	}
}

// TestArchivectlEstimateSaysWhyRestoredIsEmpty: after an archive is
// imported into a new owner, estimate shows no groups (restored ones are
// never exported, ARCH-026) and says so, rather than a silent 0 (issue 36).
func TestArchivectlEstimateSaysWhyRestoredIsEmpty(t *testing.T) {
	ctl, owner, _, _ := operatorAndOwner(t, "source", false)
	into := storetest.Owner("restored")
	dir := t.TempDir()
	key := keyFileIn(t, dir)
	archive := filepath.Join(dir, "a.xmtp")
	if _, stderr, err := ctl.run("export", "--owner", owner, "--key-file", key, "-o", archive); err != nil {
		t.Fatalf("export: %v %s", err, stderr)
	}
	if _, stderr, err := ctl.run("import", "--owner", into, "--key-file", key, archive); err != nil {
		t.Fatalf("import: %v %s", err, stderr)
	}
	out, stderr, err := ctl.run("estimate", "--owner", into)
	if err != nil || !strings.Contains(stderr, "has 1 restored conversations") || !strings.Contains(stderr, "ARCH-026") {
		t.Errorf("estimate of a restored owner: %v\n%s%s", err, out, stderr)
	}
	if _, stderr, _ := ctl.run("estimate", "--owner", owner); strings.Contains(stderr, "restored") {
		t.Errorf("estimate of an owner with live groups says: %s", stderr)
	}
}

// operatorAndOwner serves a server (with jobs when jobs is set), and
// returns archivectl as its operator, an owner holding one group, the
// store and, with jobs, the bucket's directory.
func operatorAndOwner(t *testing.T, name string, jobs bool) (ctl tool, owner string, s store.Store, bucketDir string) {
	t.Helper()
	var addr string
	if jobs {
		addr, s, bucketDir = serveJobs(t, nil)
	} else {
		addr, s = serve(t, nil)
	}
	ctl = tool{t: t, bin: build(t), env: []string{"SERVER_ADDR=" + addr, "CONTENTBACKUP_TOKEN=" + ctlToken}}
	owner = storetest.Owner(name)
	if _, err := s.PutGroup(t.Context(), owner, storetest.FullGroup("g")); err != nil {
		t.Fatal(err)
	}
	return ctl, owner, s, bucketDir
}

// keyFileIn writes an archive key (32 raw bytes) into dir.
func keyFileIn(t *testing.T, dir string) string {
	t.Helper()
	key := filepath.Join(dir, "k")
	if err := os.WriteFile(key, bytes.Repeat([]byte{3}, 32), 0o600); err != nil {
		t.Fatal(err)
	}
	return key
}
