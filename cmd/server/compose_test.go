package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/grpc"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
	"github.com/contentbackup/contentbackup/internal/transport"
)

// composeService is a service of deploy/compose/docker-compose.yaml as the
// host runs it: its environment over the Dockerfile's, the container paths
// of its volumes mapped to the files setup.sh made.
func composeService(t *testing.T, services map[string]any, name string) (env map[string]string, mounts map[string]string) {
	t.Helper()
	svc, ok := services[name].(map[string]any)
	if !ok {
		t.Fatalf("compose: no service %s", name)
	}
	env = dockerfileEnv(t)
	envs, _ := svc["environment"].(map[string]any)
	for k, v := range envs {
		env[k] = fmt.Sprint(v)
	}
	mounts = map[string]string{}
	vols, _ := svc["volumes"].([]any)
	for _, v := range vols {
		parts := strings.Split(fmt.Sprint(v), ":")
		if len(parts) >= 2 && strings.HasPrefix(parts[0], "./") {
			mounts[parts[1]] = strings.TrimPrefix(parts[0], "./")
		}
	}
	return env, mounts
}

// dockerfileEnv is the Dockerfile's ENV.
func dockerfileEnv(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)\nENV (.*?[^\\])\n`).FindSubmatch(b)
	if m == nil {
		t.Fatal("Dockerfile: no ENV")
	}
	env := map[string]string{}
	for _, kv := range regexp.MustCompile(`([A-Z_]+)=(\S+)`).FindAllSubmatch(m[1], -1) {
		env[string(kv[1])] = string(kv[2])
	}
	return env
}

// TestComposeFleet (issue 36): the compose file's two replicas, run on the
// host as it configures them (the Dockerfile's environment, then the
// service's; its mounts; setup.sh's TLS, token, policy and KEK), with the
// database and the S3 gateway standing in for its postgres and s3
// services: an export job started on one replica writes to the shared
// bucket, and the other restores that backup, under the shared KEK.
func TestComposeFleet(t *testing.T) {
	out := t.TempDir()
	setup := exec.Command("bash", "../../deploy/compose/setup.sh")
	setup.Env = append(os.Environ(), "OUT="+out)
	if b, err := setup.CombinedOutput(); err != nil {
		t.Fatalf("setup.sh: %v\n%s", err, b)
	}
	doc := yamlDocs(t, "../../deploy/compose/docker-compose.yaml")[0]
	services, _ := doc["services"].(map[string]any)
	gw, gwAddr := startGateway(t)
	if err := os.Mkdir(filepath.Join(gw.dir, "history"), 0o755); err != nil {
		t.Fatal(err) // s3-bucket makes it in the compose file
	}
	url := storetest.NewPostgresDatabase(t)
	if code, out := runIn(t.Context(), t, []string{"DATABASE_URL=" + url}, "migrate"); code != 0 {
		t.Fatalf("the compose file's migrate service: exit %d\n%s", code, out)
	}
	token, err := transport.ReadToken(filepath.Join(out, "token"))
	if err != nil {
		t.Fatal(err)
	}
	replica := func(name string) *grpc.ClientConn {
		env, mounts := composeService(t, services, name)
		for container, file := range mounts {
			for k, v := range env {
				if v == container || strings.HasPrefix(v, container+"/") && container != "" {
					env[k] = filepath.Join(out, file) + strings.TrimPrefix(v, container)
				}
			}
			// A mounted directory's file: JOB_KEYS names the directory.
			if dir := filepath.Dir(container); env["JOB_KEYS"] == dir {
				env["JOB_KEYS"] = filepath.Dir(filepath.Join(out, file))
			}
		}
		if !strings.Contains(env["JOB_BUCKETS"], "http://s3:7070") {
			t.Fatalf("compose: %s's JOB_BUCKETS %q does not name the s3 service", name, env["JOB_BUCKETS"])
		}
		env["JOB_BUCKETS"] = strings.ReplaceAll(env["JOB_BUCKETS"], "s3:7070", gwAddr)
		// The HTTP/JSON listener and the history server the file serves,
		// on free ports here, the history files in the gateway.
		if env["HTTP_LISTEN_ADDR"] == "" || env["HISTORY_LISTEN_ADDR"] == "" || !strings.Contains(env["HISTORY_BUCKET"], "http://s3:7070") {
			t.Fatalf("compose: %s serves no HTTP/JSON listener or history server on the shared bucket: %q %q %q", name, env["HTTP_LISTEN_ADDR"], env["HISTORY_LISTEN_ADDR"], env["HISTORY_BUCKET"])
		}
		env["HTTP_LISTEN_ADDR"], env["HISTORY_LISTEN_ADDR"] = "127.0.0.1:0", "127.0.0.1:0"
		env["HISTORY_BUCKET"] = strings.ReplaceAll(env["HISTORY_BUCKET"], "s3:7070", gwAddr)
		env["DATABASE_URL"] = url
		env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"] = s3Access, s3Secret
		env["LISTEN_ADDR"], env["METRICS_ADDR"], env["DATA_DIR"] = "127.0.0.1:0", "", t.TempDir()
		var list []string
		for k, v := range env {
			list = append(list, k+"="+v)
		}
		srv := serveIn(t, append(list, "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null")...)
		addr, logs := srv.addr, srv.logs
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("%s:\n%s", name, logs())
			}
		})
		opts, err := transport.DialOptions(transport.ClientOptions{CAFile: filepath.Join(out, "tls/ca.crt"), ServerName: "localhost", Token: token})
		if err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient(addr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	a, b := replica("server-a"), replica("server-b")
	if _, err := cb.NewConversationServiceClient(a).PutGroup(t.Context(), &cb.PutGroupRequest{Owner: "alice", Group: storetest.FullGroup("g")}); err != nil {
		t.Fatal(err)
	}
	done := waitJob(t, a, startExport(t, a, "alice", "s3", "compose").GetName())
	exported := &cb.ExportJobResult{}
	if done.GetError() != nil || done.GetResponse().UnmarshalTo(exported) != nil {
		t.Fatalf("replica a's export: %v", done)
	}
	op, err := cb.NewBackupServiceClient(b).StartImport(t.Context(), &cb.StartImportRequest{Owner: "alice-restored", SourceOwner: "alice", Backup: exported.GetBackup()})
	if err != nil {
		t.Fatal(err)
	}
	if done := waitJob(t, b, op.GetName()); done.GetError() != nil {
		t.Fatalf("replica b restoring replica a's backup: %v", done.GetError())
	}
	groups, err := cb.NewConversationServiceClient(b).ListGroups(t.Context(), &cb.ListGroupsRequest{Owner: "alice-restored"})
	if err != nil || len(groups.GetGroups()) == 0 {
		t.Errorf("the restored owner's groups: %v, %v", groups, err)
	}
}
