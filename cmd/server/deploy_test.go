package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
	"go.yaml.in/yaml/v3"
)

// TestDeployFiles holds the deployment files to what the perimeter needs:
// a numeric non-root user, versioned images, TLS and the policy mounted
// from Secrets, HTTP probes (gRPC probes cannot speak TLS), a
// NetworkPolicy, and a compose file with its one-shot migration.
func TestDeployFiles(t *testing.T) {
	docker, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^USER 65532:65532$`).Match(docker) {
		t.Error("Dockerfile: USER is not numeric 65532:65532 (runAsNonRoot refuses a named user)")
	}

	kinds := map[string]map[string]any{}
	for _, doc := range yamlDocs(t, "../../deploy/kubernetes/contentbackup.yaml") {
		kinds[doc["kind"].(string)] = doc
	}
	for _, k := range []string{"Deployment", "Service", "NetworkPolicy"} {
		if kinds[k] == nil {
			t.Errorf("kubernetes: no %s", k)
		}
	}
	manifest, _ := os.ReadFile("../../deploy/kubernetes/contentbackup.yaml")
	compose, _ := os.ReadFile("../../deploy/compose/docker-compose.yaml")
	for name, b := range map[string][]byte{"kubernetes": manifest, "compose": compose} {
		if bytes.Contains(b, []byte(":latest")) {
			t.Errorf("%s: an image tagged latest", name)
		}
	}
	text := string(manifest)
	for _, want := range []string{"runAsNonRoot: true", "runAsUser: 65532", "secretName: contentbackup-tls", "secretName: contentbackup-policy",
		"TLS_CERT", "TLS_CLIENT_CA", "AUTH_POLICY", "PAGE_TOKEN_KEY_FILE", "path: /livez", "path: /readyz",
		// Every door the README sells, served, in the Service and let
		// through (issue 51), and HTTPS out for the buckets and the KMS.
		"HTTP_LISTEN_ADDR", "HISTORY_LISTEN_ADDR", "HISTORY_BUCKET", "{name: http, port: 50052", "{name: history, port: 5558",
		"{protocol: TCP, port: 50052}", "{protocol: TCP, port: 5558}", "{protocol: TCP, port: 443}"} {
		if !strings.Contains(text, want) {
			t.Errorf("kubernetes: no %q", want)
		}
	}
	if strings.Contains(text, "grpc: {port") {
		t.Error("kubernetes: a gRPC probe, which cannot reach a TLS port")
	}

	c := yamlDocs(t, "../../deploy/compose/docker-compose.yaml")[0]
	services, _ := c["services"].(map[string]any)
	for _, s := range []string{"postgres", "migrate", "s3", "server-a", "server-b"} {
		if services[s] == nil {
			t.Errorf("compose: no service %s", s)
		}
	}
	if !strings.Contains(string(compose), "service_completed_successfully") || !strings.Contains(string(compose), "image: postgres:15") {
		t.Error("compose: the server does not wait for the one-shot migration, or Postgres is not 15")
	}
	// The replicas share the bucket and the KEK (TestComposeFleet runs
	// them); the gateway is the version the tests run.
	for _, name := range []string{"server-a", "server-b"} {
		env, _ := services[name].(map[string]any)["environment"].(map[string]any)
		if env["JOB_BUCKETS"] == nil || env["JOB_KEYS"] == nil {
			t.Errorf("compose: %s has no shared JOB_BUCKETS and JOB_KEYS", name)
		}
	}
	mk, _ := os.ReadFile("../../Makefile")
	if v := regexp.MustCompile(`VERSITYGW_VERSION\s*:=\s*(\S+)`).FindSubmatch(mk); v == nil || !strings.Contains(string(compose), "versity/versitygw:"+string(v[1])) {
		t.Error("compose: the S3 gateway is not the version the Makefile pins for the tests")
	}
}

func yamlDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return decodeYAMLDocs(t, path, b)
}

func decodeYAMLDocs(t *testing.T, path string, b []byte) []map[string]any {
	t.Helper()
	var docs []map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var d map[string]any
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		docs = append(docs, d)
	}
}

// TestHelmChartSetsOnlyFlags (issue 51): with every option of the Helm
// chart on, each variable its containers set names a flag of the command
// they run (server serve, server migrate), or is the Go runtime's
// GOMEMLIMIT: a renamed flag fails here, not in a cluster. deploy/check
// decodes the same rendering into the Kubernetes types.
func TestHelmChartSetsOnlyFlags(t *testing.T) {
	helm, err := exec.LookPath("helm")
	if err != nil {
		t.Fatalf("helm is required: make tools builds it into .tools/bin (%v)", err)
	}
	chart := "../../deploy/helm/contentbackup"
	cmd := exec.Command(helm, "template", "contentbackup", chart, "--values", chart+"/ci/all-on-values.yaml")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.String())
	}
	var c cli
	parser, err := kong.New(&c, parserOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	envs := map[string]map[string]bool{}
	for _, node := range parser.Model.Children {
		envs[node.Name] = map[string]bool{"GOMEMLIMIT": true}
		for _, group := range node.AllFlags(false) {
			for _, fl := range group {
				for _, e := range fl.Envs {
					envs[node.Name][e] = true
				}
			}
		}
	}
	checked := 0
	for _, doc := range decodeYAMLDocs(t, "helm template", out) {
		if doc["kind"] != "Deployment" {
			continue
		}
		spec := doc["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		for _, list := range []string{"initContainers", "containers"} {
			containers, _ := spec[list].([]any)
			for _, c := range containers {
				c := c.(map[string]any)
				command := c["args"].([]any)[0].(string)
				for _, e := range c["env"].([]any) {
					name := e.(map[string]any)["name"].(string)
					checked++
					if !envs[command][name] {
						t.Errorf("the chart's %s container sets %s, which names no flag of server %s", c["name"], name, command)
					}
				}
			}
		}
	}
	if checked < 20 {
		t.Errorf("only %d variables found in the rendered Deployment", checked)
	}
}
