package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"

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
