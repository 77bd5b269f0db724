// Package check holds the deployment files to the schemas of what loads
// them, strictly: the Helm chart's rendered output, for its default values
// and with every option on or off, decoded into the Kubernetes API types
// (and the Prometheus Operator's) with unknown fields refused, after helm
// lint at the version the Makefile pins; and the compose file through the
// compose-spec loader. A separate module, so that the server's go.mod
// carries none of the Kubernetes libraries.
package check

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

const chart = "../helm/contentbackup"

func helm(t *testing.T, args ...string) []byte {
	t.Helper()
	bin, err := exec.LookPath("helm")
	if err != nil {
		t.Fatalf("helm is required: make tools builds it into .tools/bin (%v)", err)
	}
	cmd := exec.Command(bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return out
}

// rendered is one values file's output, decoded strictly by kind.
type rendered struct {
	deployments []appsv1.Deployment
	services    []corev1.Service
	pdbs        []policyv1.PodDisruptionBudget
	policies    []networkingv1.NetworkPolicy
	monitors    []monitoringv1.ServiceMonitor
	rules       []monitoringv1.PrometheusRule
}

func render(t *testing.T, values string) rendered {
	t.Helper()
	args := []string{"template", "contentbackup", chart}
	if values != "" {
		args = append(args, "--values", values)
	}
	return decode(t, helm(t, args...))
}

// strictly is doc decoded into its API type, an unknown field an error.
func strictly[T any](t *testing.T, kind string, doc []byte) T {
	t.Helper()
	var o T
	if err := yaml.UnmarshalStrict(doc, &o); err != nil {
		t.Errorf("%s does not decode strictly into its API type: %v\n%s", kind, err, doc)
	}
	return o
}

// decode decodes each YAML document of manifests by its kind, strictly.
func decode(t *testing.T, manifests []byte) rendered {
	t.Helper()
	var r rendered
	for _, doc := range bytes.Split(manifests, []byte("\n---")) {
		var head struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatalf("a rendered document: %v\n%s", err, doc)
		}
		if head.Kind == "" {
			continue
		}
		kind := head.APIVersion + " " + head.Kind
		switch kind {
		case "apps/v1 Deployment":
			r.deployments = append(r.deployments, strictly[appsv1.Deployment](t, kind, doc))
		case "v1 Service":
			r.services = append(r.services, strictly[corev1.Service](t, kind, doc))
		case "policy/v1 PodDisruptionBudget":
			r.pdbs = append(r.pdbs, strictly[policyv1.PodDisruptionBudget](t, kind, doc))
		case "networking.k8s.io/v1 NetworkPolicy":
			r.policies = append(r.policies, strictly[networkingv1.NetworkPolicy](t, kind, doc))
		case "monitoring.coreos.com/v1 ServiceMonitor":
			r.monitors = append(r.monitors, strictly[monitoringv1.ServiceMonitor](t, kind, doc))
		case "monitoring.coreos.com/v1 PrometheusRule":
			r.rules = append(r.rules, strictly[monitoringv1.PrometheusRule](t, kind, doc))
		default:
			t.Errorf("the chart renders a %s %s this test does not know", head.APIVersion, head.Kind)
		}
	}
	return r
}

func env(c corev1.Container) map[string]bool {
	out := map[string]bool{}
	for _, e := range c.Env {
		out[e.Name] = true
	}
	return out
}

func ports(s corev1.Service) []int32 {
	var out []int32
	for _, p := range s.Spec.Ports {
		out = append(out, p.Port)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// TestHelmChart (issue 51): helm lint passes with each values file, and
// each rendering is valid Kubernetes (strictly decoded) and serves what
// its values say: every door with the defaults, the Prometheus Operator's
// objects with every option on, no HTTP/JSON or history door with them
// off.
func TestHelmChart(t *testing.T) {
	for _, values := range []string{"", chart + "/ci/all-on-values.yaml", chart + "/ci/all-off-values.yaml"} {
		args := []string{"lint", "--strict", chart}
		if values != "" {
			args = append(args, "--values", values)
		}
		helm(t, args...)
	}

	def := render(t, "")
	if len(def.deployments) != 1 || len(def.services) != 2 || len(def.pdbs) != 1 || len(def.policies) != 1 || len(def.monitors) != 0 || len(def.rules) != 0 {
		t.Fatalf("defaults: %d deployments, %d services, %d PDBs, %d network policies, %d service monitors, %d rules",
			len(def.deployments), len(def.services), len(def.pdbs), len(def.policies), len(def.monitors), len(def.rules))
	}
	server := def.deployments[0].Spec.Template.Spec.Containers[0]
	for _, name := range []string{"DATABASE_URL", "HTTP_LISTEN_ADDR", "HISTORY_LISTEN_ADDR", "HISTORY_BUCKET", "TLS_CERT", "TLS_CLIENT_CA", "AUTH_POLICY", "PAGE_TOKEN_KEY_FILE", "JOB_BUCKETS", "JOB_KEY_KEEPER"} {
		if !env(server)[name] {
			t.Errorf("defaults: the server has no %s", name)
		}
	}
	if got := ports(def.services[0]); len(got) != 4 || got[0] != 5558 || got[1] != 9464 || got[2] != 50051 || got[3] != 50052 {
		t.Errorf("defaults: the Service's ports are %v; want gRPC, HTTP/JSON, history and metrics", got)
	}
	if img := server.Image; img != "contentbackup:0.3.0" {
		t.Errorf("defaults: image %q, want the chart's appVersion", img)
	}

	on := render(t, chart+"/ci/all-on-values.yaml")
	if len(on.monitors) != 1 || len(on.rules) != 1 || len(on.rules[0].Spec.Groups) == 0 {
		t.Fatalf("all on: %d service monitors, %d rules", len(on.monitors), len(on.rules))
	}
	alerts, err := os.ReadFile("../prometheus/contentbackup-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct{ Groups []monitoringv1.RuleGroup }
	if err := yaml.UnmarshalStrict(alerts, &file); err != nil {
		t.Fatalf("deploy/prometheus/contentbackup-alerts.yml: %v", err)
	}
	if len(file.Groups) != len(on.rules[0].Spec.Groups) {
		t.Errorf("the PrometheusRule has %d groups; deploy/prometheus has %d", len(on.rules[0].Spec.Groups), len(file.Groups))
	}
	if e := env(on.deployments[0].Spec.Template.Spec.Containers[0]); !e["JWT_JWKS"] || !e["SCHEDULE"] || !e["MAX_JOBS"] {
		t.Errorf("all on: the server lacks JWT_JWKS, SCHEDULE or an extra variable: %v", e)
	}
	if got := *on.deployments[0].Spec.Replicas; got != 3 {
		t.Errorf("all on: %d replicas, want 3", got)
	}

	off := render(t, chart+"/ci/all-off-values.yaml")
	if len(off.pdbs) != 0 || len(off.policies) != 0 {
		t.Errorf("all off: %d PDBs, %d network policies", len(off.pdbs), len(off.policies))
	}
	if e := env(off.deployments[0].Spec.Template.Spec.Containers[0]); e["HTTP_LISTEN_ADDR"] || e["HISTORY_LISTEN_ADDR"] || e["TLS_CLIENT_CA"] {
		t.Errorf("all off: the server still serves HTTP/JSON, history or client certificates: %v", e)
	}
	if got := ports(off.services[0]); len(got) != 2 {
		t.Errorf("all off: the Service's ports are %v; want gRPC and metrics", got)
	}
}

// TestKubernetesManifest: the plain manifest, for those who apply it
// without Helm, is valid Kubernetes too.
func TestKubernetesManifest(t *testing.T) {
	b, err := os.ReadFile("../kubernetes/contentbackup.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := decode(t, b)
	if len(r.deployments) != 1 || len(r.services) != 2 || len(r.policies) != 1 || len(r.pdbs) != 1 {
		t.Errorf("deploy/kubernetes: %d deployments, %d services, %d network policies, %d PDBs", len(r.deployments), len(r.services), len(r.policies), len(r.pdbs))
	}
}

// TestComposeFile (issue 51): the compose file loads through the
// compose-spec loader (its schema checked, every interpolation resolved),
// and every server service publishes each door.
func TestComposeFile(t *testing.T) {
	dir, err := filepath.Abs("../compose")
	if err != nil {
		t.Fatal(err)
	}
	body, err := os.ReadFile(filepath.Join(dir, "docker-compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	project, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  dir,
		ConfigFiles: []types.ConfigFile{{Filename: "docker-compose.yaml", Content: body}},
		Environment: types.Mapping{},
	}, func(o *loader.Options) { o.SetProjectName("contentbackup", true) })
	if err != nil {
		t.Fatalf("the compose-spec loader refuses deploy/compose/docker-compose.yaml: %v", err)
	}
	for _, name := range []string{"server-a", "server-b"} {
		svc, ok := project.Services[name]
		if !ok {
			t.Fatalf("compose: no service %s", name)
		}
		published := map[uint32]bool{}
		for _, p := range svc.Ports {
			published[p.Target] = true
		}
		for _, port := range []uint32{50051, 50052, 5558, 9464} {
			if !published[port] {
				t.Errorf("compose: %s does not publish %d", name, port)
			}
		}
	}
}
