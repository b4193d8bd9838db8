package kubernetes

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/cnibox/cnibox/agent/netconf"
)

// chartDir is cnibox's Helm chart (deploy/helm/cnibox).
const chartDir = "../helm/cnibox"

// helmBinary is $CNIBOX_HELM, or the pinned helm deploy/helm/helm.sh builds
// once into the user's cache.
func helmBinary(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("CNIBOX_HELM"); h != "" {
		return h
	}
	if testing.Short() {
		t.Skip("builds helm (deploy/helm/helm.sh)")
	}
	var stderr bytes.Buffer
	cmd := exec.Command("bash", "../helm/helm.sh")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("deploy/helm/helm.sh: %v\n%s", err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// helmTemplate renders the chart as release cnibox in kube-system with
// args (--set ...): its output, or helm's error with its stderr.
func helmTemplate(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(helmBinary(t), append([]string{"template", "cnibox", chartDir, "--namespace", "kube-system"}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("helm template %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

func mustTemplate(t *testing.T, args ...string) string {
	t.Helper()
	out, err := helmTemplate(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// objects decodes a YAML stream into its objects by "Kind namespace/name",
// each as generic JSON; a ConfigMap's data that is JSON is decoded too (the
// same document, however indented).
func objects(t *testing.T, what, stream string) map[string]any {
	t.Helper()
	objs := map[string]any{}
	for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(stream, -1) {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("%s document %d: %v", what, i, err)
		}
		if o == nil {
			continue
		}
		meta, _ := o["metadata"].(map[string]any)
		if data, ok := o["data"].(map[string]any); ok && o["kind"] == "ConfigMap" {
			for k, v := range data {
				var j any
				if s, ok := v.(string); ok && json.Unmarshal([]byte(s), &j) == nil {
					data[k] = j
				}
			}
		}
		key := fmt.Sprintf("%v %v/%v", o["kind"], meta["namespace"], meta["name"])
		if _, dup := objs[key]; dup {
			t.Fatalf("%s: %s twice", what, key)
		}
		objs[key] = o
	}
	return objs
}

// sameObjects fails the test where got and want differ, object by object.
func sameObjects(t *testing.T, what string, got, want map[string]any) {
	t.Helper()
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s lacks %s", what, k)
			continue
		}
		if !reflect.DeepEqual(g, w) {
			gj, _ := json.MarshalIndent(g, "", " ")
			wj, _ := json.MarshalIndent(w, "", " ")
			t.Errorf("%s: %s differs:\n got %s\nwant %s", what, k, gj, wj)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s has %s, which the manifest has not", what, k)
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestChartDefaultsAreTheManifest: the chart with its default values
// renders the objects of cnibox.yaml, field for field (comments and the
// JSON's indentation aside); with dhcp.enabled those of cnibox-dhcp.yaml
// besides; its crds/ are nad-crd.yaml and whereabouts-crds.yaml as they
// are here.
func TestChartDefaultsAreTheManifest(t *testing.T) {
	want := objects(t, "cnibox.yaml", readFile(t, "cnibox.yaml"))
	sameObjects(t, "the chart's defaults", objects(t, "helm template", mustTemplate(t)), want)

	for k, v := range objects(t, "cnibox-dhcp.yaml", readFile(t, "cnibox-dhcp.yaml")) {
		want[k] = v
	}
	sameObjects(t, "the chart with dhcp.enabled", objects(t, "helm template", mustTemplate(t, "--set", "dhcp.enabled=true")), want)

	for _, crd := range []string{"nad-crd.yaml", "whereabouts-crds.yaml"} {
		if readFile(t, filepath.Join(chartDir, "crds", crd)) != readFile(t, crd) {
			t.Errorf("%s/crds/%s is not deploy/kubernetes/%s: copy it there", chartDir, crd, crd)
		}
	}
}

// renderChart writes the chart's output for args where the manifest tests
// read: cnibox.yaml (the chart without dhcp), cnibox-dhcp.yaml (its dhcp
// DaemonSet alone) and this directory's cnibox-multus.yaml (not in the
// chart), and points eachDoc there until the test ends.
func renderChart(t *testing.T, args ...string) {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"cnibox.yaml":        mustTemplate(t, append(args, "--set", "dhcp.enabled=false")...),
		"cnibox-dhcp.yaml":   mustTemplate(t, append(args, "--set", "dhcp.enabled=true", "--show-only", "templates/dhcp.yaml")...),
		"cnibox-multus.yaml": readFile(t, "cnibox-multus.yaml"),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := manifestDir
	manifestDir = dir
	t.Cleanup(func() { manifestDir = old })
}

// TestChartHoldsTheRules runs the manifests' tests on the chart's output:
// with the defaults, every one that reads cnibox.yaml and cnibox-dhcp.yaml
// (the install step run against the binary included); with the agent's
// optional features off, the RBAC (each feature's binding gone with its
// flag) and the pod security rules.
func TestChartHoldsTheRules(t *testing.T) {
	renderChart(t)
	for name, test := range map[string]func(*testing.T){
		"ConfigMap": TestConfigMap, "DaemonSet": TestDaemonSet, "RBAC": TestRBAC, "PodSecurity": TestPodSecurity,
		"DHCPDaemonSet": TestDHCPDaemonSet, "NoCRDWithTheDaemonSets": TestNoCRDWithTheDaemonSets, "InstallStep": TestInstallStep,
	} {
		t.Run("defaults/"+name, test)
	}
	renderChart(t, "--set", "podAPI=false,clusterIPAM.enabled=false,ipMasq=false,networkPolicy.enabled=false")
	t.Run("featuresOff/RBAC", TestRBAC)
	t.Run("featuresOff/PodSecurity", TestPodSecurity)
	cmd := load(t).ds.Spec.Template.Spec.Containers[0].Command
	for _, flag := range []string{"--pod-api", "--cluster-ipam", "--ip-masq"} {
		if slices.Contains(cmd, flag) {
			t.Errorf("featuresOff: the agent still has %s", flag)
		}
	}
	if !slices.Contains(cmd, "--network-policy=false") {
		t.Errorf("featuresOff: the agent's command %v lacks --network-policy=false", cmd)
	}
	renderChart(t, "--set", "networkPolicy.clusterNetworkPolicies=true")
	t.Run("clusterNetworkPolicies/RBAC", TestRBAC)
}

// TestChartValues: the values an operator changes land where the agent
// and the kubelet read them.
func TestChartValues(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	renderChart(t, "--set", "podCIDR=10.10.0.0/16,mtu=1400,backend.type=wireguard,backend.listenPort=51000",
		"--set", "interface={eth1,192.0.2.7},clusterIPAM.namespace=ipam",
		"--set", "image.repository=registry.example/cnibox,image.tag=v1,image.digest="+digest,
		"--set", "nodeSelector.pool=edge,tolerations=null,resources.limits.memory=200Mi",
		"--set", "apiServer.host=192.0.2.1,apiServer.port=6443")
	m := load(t)
	cfg, err := netconf.Parse([]byte(m.cm.Data["net-conf.json"]))
	if err != nil {
		t.Fatalf("net-conf.json: %v\n%s", err, m.cm.Data["net-conf.json"])
	}
	if cfg.Network.String() != "10.10.0.0/16" || cfg.Backend.Type != netconf.TypeWireGuard || cfg.Backend.MTU != 1400 || cfg.Backend.ListenPort != 51000 {
		t.Errorf("net-conf.json gives %s %+v", cfg.Network, cfg.Backend)
	}
	if m.cm.Data["api-server-host"] != "192.0.2.1" || m.cm.Data["api-server-port"] != "6443" {
		t.Errorf("ConfigMap data %v: the API server's address is not there", m.cm.Data)
	}
	spec := m.ds.Spec.Template.Spec
	cmd := spec.Containers[0].Command
	for _, want := range []string{"--iface=eth1", "--iface=192.0.2.7", "--cluster-ipam-namespace=ipam"} {
		if !slices.Contains(cmd, want) {
			t.Errorf("agent command %v lacks %s", cmd, want)
		}
	}
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		if c.Image != "registry.example/cnibox:v1@"+digest {
			t.Errorf("container %s: image %s", c.Name, c.Image)
		}
	}
	if spec.NodeSelector["pool"] != "edge" || len(spec.Tolerations) != 0 {
		t.Errorf("nodeSelector %v, tolerations %v", spec.NodeSelector, spec.Tolerations)
	}
	if q := spec.Containers[0].Resources.Limits[corev1.ResourceMemory]; q.String() != "200Mi" {
		t.Errorf("agent memory limit %s, want 200Mi", q.String())
	}
	r := loadRBAC(t, "cnibox.yaml")
	if role, rb := r.roles["cnibox-cluster-ipam"], r.roleBindings["cnibox-cluster-ipam"]; role == nil || rb == nil || role.Namespace != "ipam" || rb.Namespace != "ipam" {
		t.Errorf("the cluster IPAM's Role and binding are not in the pools' namespace ipam: %+v %+v", role, rb)
	}
	var dhcp *appsv1.DaemonSet
	eachDoc(t, "cnibox-dhcp.yaml", func(kind, doc string) any { dhcp = &appsv1.DaemonSet{}; return dhcp })
	if dhcp.Spec.Template.Spec.Containers[0].Image != "registry.example/cnibox:v1@"+digest {
		t.Errorf("dhcp image %s", dhcp.Spec.Template.Spec.Containers[0].Image)
	}

	renderChart(t, "--set", "podCIDRv6=fd00:10:244::/56,backend.vni=4096,backend.directRouting=true")
	cfg, err = netconf.Parse([]byte(load(t).cm.Data["net-conf.json"]))
	if err != nil || !cfg.EnableIPv6 || cfg.IPv6Network.String() != "fd00:10:244::/56" || cfg.Backend.VNI != 4096 || !cfg.Backend.DirectRouting {
		t.Errorf("dual stack, VNI and DirectRouting: net-conf.json gives %+v, %v", cfg, err)
	}
}

// TestChartSchema: values.schema.json refuses a misspelt key or a bad
// value, and helm's message names the field.
func TestChartSchema(t *testing.T) {
	for _, c := range []struct{ set, field string }{
		{"backend.tpye=vxlan", "tpye"},
		{"imgae.tag=v1", "imgae"},
		{"backend.type=udp", "type"},
		{"mtu=big", "mtu"},
		{"podCIDR=10.244.0.0", "podCIDR"},
		{"image.digest=deadbeef", "digest"},
		{"clusterIPAM.enable=false", "enable"},
	} {
		_, err := helmTemplate(t, "--set", c.set)
		if err == nil {
			t.Errorf("--set %s: rendered; want the schema to refuse it", c.set)
			continue
		}
		if !strings.Contains(err.Error(), c.field) {
			t.Errorf("--set %s: the error does not name %s: %v", c.set, c.field, err)
		}
	}
}

// TestChartLint: helm lint --strict finds nothing.
func TestChartLint(t *testing.T) {
	out, err := exec.Command(helmBinary(t), "lint", "--strict", chartDir).CombinedOutput()
	if err != nil || strings.Contains(string(out), "[WARNING]") || strings.Contains(string(out), "[ERROR]") {
		t.Errorf("helm lint --strict: %v\n%s", err, out)
	}
}

// TestChartImageValues: the values file make image writes (deploy/image
// -values-out) makes the chart name the image it built, by tag and digest,
// as bin/cnibox.yaml does.
func TestChartImageValues(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "cnibox")
	if err := os.WriteFile(bin, []byte("binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	values, manifest := filepath.Join(dir, "values.yaml"), filepath.Join(dir, "cnibox.yaml")
	build := exec.Command("go", "run", "../image", "-o", filepath.Join(dir, "image.tar"), "-ref", "registry.example/cnibox:v3",
		"-manifest", "cnibox.yaml", "-manifest-out", manifest, "-values-out", values, bin)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("deploy/image: %v\n%s", err, out)
	}
	want := regexp.MustCompile(`(?m)^\s*image:\s*(\S+)`).FindStringSubmatch(readFile(t, manifest))
	if want == nil || !strings.Contains(want[1], "registry.example/cnibox:v3@sha256:") {
		t.Fatalf("the rendered manifest names %v", want)
	}
	renderChart(t, "-f", values)
	spec := load(t).ds.Spec.Template.Spec
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		if c.Image != want[1] {
			t.Errorf("with %s, container %s runs %s, want %s (bin/cnibox.yaml's)", values, c.Name, c.Image, want[1])
		}
	}
}
