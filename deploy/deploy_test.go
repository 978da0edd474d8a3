// Package deploy_test validates what deploy/ ships: the Kubernetes
// manifests decode strictly into the API's types and fit together, the
// Envoy config decodes into go-control-plane's Bootstrap and passes its
// validation, the compose file wires the right images, ports and files,
// the Dockerfile's build command makes a static binary that starts, and
// every metric the dashboard and alert rules read is one sluice serves.
// Its own module keeps these dependencies out of sluice's go.mod.
package deploy_test

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/server"
)

func read(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// The manifests decode strictly (an unknown or misspelt field fails) and
// fit together: the ConfigMap holds a valid policy file at the path the
// container reads, the probes and the Service name ports the container
// has, the PodDisruptionBudget selects the Deployment's pods.
func TestKubernetesManifests(t *testing.T) {
	var cm corev1.ConfigMap
	var dep appsv1.Deployment
	var svc corev1.Service
	var pdb policyv1.PodDisruptionBudget
	for _, doc := range strings.Split(string(read(t, "kubernetes/sluice.yaml")), "\n---\n") {
		var meta struct{ Kind string }
		if err := sigsyaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		target := map[string]any{"ConfigMap": &cm, "Deployment": &dep, "Service": &svc, "PodDisruptionBudget": &pdb}[meta.Kind]
		if target == nil {
			t.Fatalf("unexpected kind %q", meta.Kind)
		}
		if err := sigsyaml.UnmarshalStrict([]byte(doc), target); err != nil {
			t.Fatalf("%s: %v", meta.Kind, err)
		}
	}
	if _, err := config.Parse("configmap", []byte(cm.Data["sluice.yaml"])); err != nil {
		t.Fatalf("the ConfigMap's policy file: %v", err)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	ports := map[string]bool{}
	for _, p := range c.Ports {
		ports[p.Name] = true
	}
	for _, probe := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
		if probe == nil || probe.HTTPGet == nil || !ports[probe.HTTPGet.Port.String()] {
			t.Fatalf("a probe on no port of the container: %+v", probe)
		}
	}
	if c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Fatalf("probes on %s and %s", c.LivenessProbe.HTTPGet.Path, c.ReadinessProbe.HTTPGet.Path)
	}
	i := slices.Index(c.Args, "-config")
	if i < 0 || len(c.VolumeMounts) == 0 || !strings.HasPrefix(c.Args[i+1], c.VolumeMounts[0].MountPath+"/") {
		t.Fatalf("the container reads %v, the ConfigMap is mounted at %+v", c.Args, c.VolumeMounts)
	}
	for _, p := range svc.Spec.Ports {
		if !ports[p.TargetPort.String()] {
			t.Fatalf("the Service targets %s, which the container does not have", p.TargetPort.String())
		}
	}
	for k, v := range pdb.Spec.Selector.MatchLabels {
		if dep.Spec.Template.Labels[k] != v || svc.Spec.Selector[k] != v {
			t.Fatalf("selector %s=%s does not match the pods", k, v)
		}
	}
	if dep.Spec.Template.Spec.SecurityContext == nil || !*dep.Spec.Template.Spec.SecurityContext.RunAsNonRoot {
		t.Fatal("the pod may run as root")
	}
}

// envoyBootstrap decodes the compose example's Envoy config.
func envoyBootstrap(t *testing.T) *bootstrapv3.Bootstrap {
	t.Helper()
	js, err := sigsyaml.YAMLToJSON(read(t, "compose/envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &b); err != nil {
		t.Fatalf("envoy.yaml: %v", err)
	}
	if err := b.ValidateAll(); err != nil {
		t.Fatalf("envoy.yaml: %v", err)
	}
	return &b
}

// The Envoy config decodes into go-control-plane's Bootstrap, passes its
// validation, and asks sluice's gRPC port for a domain sluice has.
func TestEnvoyConfig(t *testing.T) {
	b := envoyBootstrap(t)
	var sluicePort uint32
	for _, c := range b.StaticResources.Clusters {
		if c.Name == "sluice" {
			sluicePort = c.LoadAssignment.Endpoints[0].LbEndpoints[0].GetEndpoint().Address.GetSocketAddress().GetPortValue()
		}
	}
	if sluicePort != 8081 {
		t.Fatalf("Envoy asks sluice on port %d, sluice serves gRPC on 8081", sluicePort)
	}
	var hcm hcmv3.HttpConnectionManager
	if err := b.StaticResources.Listeners[0].FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	var domain string
	for _, f := range hcm.HttpFilters {
		if f.Name == "envoy.filters.http.ratelimit" {
			var m map[string]any
			js, _ := protojson.Marshal(f.GetTypedConfig())
			json.Unmarshal(js, &m)
			domain, _ = m["domain"].(string)
		}
	}
	cfg, err := config.Load("compose/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Domains[domain] == nil {
		t.Fatalf("Envoy asks for domain %q, which sluice.yaml does not have", domain)
	}
}

// The compose file wires the images, ports and files the example needs.
func TestCompose(t *testing.T) {
	var c struct {
		Services map[string]struct {
			Image   string
			Build   struct{ Context, Dockerfile string }
			Command []string
			Ports   []string
			Volumes []string
		}
	}
	if err := yaml.Unmarshal(read(t, "compose/compose.yaml"), &c); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"redis": "redis:", "envoy": "envoyproxy/envoy:", "upstream": "hashicorp/http-echo:"}
	for name, image := range want {
		if !strings.HasPrefix(c.Services[name].Image, image) {
			t.Errorf("service %s: image %q, want %s...", name, c.Services[name].Image, image)
		}
	}
	s := c.Services["sluice"]
	if filepath.Join("compose", s.Build.Context, s.Build.Dockerfile) != filepath.Join("..", "deploy", "Dockerfile") && !fileExists(filepath.Join("compose", s.Build.Context, s.Build.Dockerfile)) {
		t.Errorf("sluice builds from %s, which does not exist", s.Build.Dockerfile)
	}
	for _, svc := range c.Services {
		for _, v := range svc.Volumes {
			if src, _, _ := strings.Cut(v, ":"); strings.HasPrefix(src, "./") && !fileExists(filepath.Join("compose", src)) {
				t.Errorf("volume %s: no such file", v)
			}
		}
	}
	if !slices.Contains(c.Services["envoy"].Ports, "10000:10000") || !slices.Contains(s.Ports, "8080:8080") {
		t.Errorf("ports: envoy %v, sluice %v", c.Services["envoy"].Ports, s.Ports)
	}
	cfg, err := config.Load("compose/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Store.Redis == nil || !strings.Contains(cfg.Store.Redis.URL, "//redis:") {
		t.Errorf("sluice.yaml's store is not the redis service: %+v", cfg.Store)
	}
	if !strings.Contains(string(read(t, "compose/envoy.yaml")), "address: upstream, port_value: 5678") ||
		!slices.Contains(c.Services["upstream"].Command, ":5678") {
		t.Error("Envoy and the upstream disagree on its port")
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// The Dockerfile's build command, run the same way, makes a static binary
// (no interpreter, no shared library) that starts and serves.
func TestDockerfileBuild(t *testing.T) {
	var build string
	for _, line := range strings.Split(string(read(t, "Dockerfile")), "\n") {
		if strings.HasPrefix(line, "RUN ") && strings.Contains(line, "go build") {
			build = strings.TrimPrefix(line, "RUN ")
		}
	}
	if build == "" {
		t.Fatal("no go build in the Dockerfile")
	}
	out := filepath.Join(t.TempDir(), "sluice")
	build = strings.Replace(build, "/out/sluice", out, 1)
	cmd := exec.Command("sh", "-c", build)
	cmd.Dir = ".."
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", build, err, b)
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatal("the binary needs an interpreter: not static")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Fatalf("the binary needs %v: not static", libs)
	}
	f.Close()
	// grpcnotrace and vtprotobuf, as cmd/sluice's end-to-end tests build it.
	info, err := buildinfo.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, tag := range []string{"grpcnotrace", "vtprotobuf"} {
		if !slices.ContainsFunc(info.Settings, func(s debug.BuildSetting) bool {
			return s.Key == "-tags" && slices.Contains(strings.Split(s.Value, ","), tag)
		}) {
			t.Errorf("the binary is built without -tags %s: %v", tag, info.Settings)
		}
	}
	srv := exec.Command(out, "serve", "-http", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-admin", "")
	var buf bytes.Buffer
	srv.Stdout, srv.Stderr = &buf, &buf
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(buf.String(), "serving"); {
		if time.Now().After(deadline) {
			t.Fatalf("the binary did not start:\n%s", buf.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var metricName = regexp.MustCompile(`sluice_[a-z_]+`)

// servedMetrics returns the names of the metrics a service on the store at
// redisURL (the memory store for "") serves after a few checks and a
// reload; a histogram's _bucket series too.
func servedMetrics(t *testing.T, redisURL string) map[string]bool {
	file := filepath.Join(t.TempDir(), "sluice.yaml")
	os.WriteFile(file, []byte("listeners: {drain: 0s}\npolicies: [{name: p, limit: fixed_window 2/1h}]\n"), 0o644)
	s, err := server.New(server.Options{Config: file, RedisURL: redisURL, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(t.Context())
	for range 3 {
		r, err := http.Post("http://"+s.Addrs().HTTP+"/v1/check", "application/json", strings.NewReader(`{"checks":[{"policy":"p","key":"k"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
	}
	s.Reload()
	resp, err := http.Get("http://" + s.Addrs().HTTP + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	served := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (sluice_[a-z_]+) (\w+)`).FindAllStringSubmatch(string(body), -1) {
		served[m[1]] = true
		if m[2] == "histogram" {
			served[m[1]+"_bucket"] = true
		}
	}
	return served
}

// Every metric the dashboard and the alert rules read is one that sluice
// serves, so that a renamed metric cannot leave a blank panel or a silent
// alert.
func TestMonitoringReadsServedMetrics(t *testing.T) {
	// On Redis and on the memory store, each with a policy near its limit
	// and one reload, so that every series has a sample to show.
	served := map[string]bool{}
	for _, redisURL := range []string{redistest.Standalone(t).URL(), ""} {
		maps.Copy(served, servedMetrics(t, redisURL))
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(read(t, "monitoring/dashboard.json"), &dash); err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, p := range dash.Panels {
		for _, target := range p.Targets {
			exprs = append(exprs, target.Expr)
		}
	}
	var rules struct {
		Groups []struct {
			Rules []struct{ Alert, Expr string }
		}
	}
	if err := yaml.Unmarshal(read(t, "monitoring/alerts.yaml"), &rules); err != nil {
		t.Fatal(err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" {
				t.Fatalf("a rule without a name or an expression: %+v", r)
			}
			exprs = append(exprs, r.Expr)
		}
	}
	if len(exprs) < 10 {
		t.Fatalf("only %d expressions read", len(exprs))
	}
	for _, e := range exprs {
		for _, name := range metricName.FindAllString(e, -1) {
			if !served[name] {
				t.Errorf("%q reads %s, which sluice does not serve", e, name)
			}
		}
	}
}
