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
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
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

// renders are helm template's answers in this process, by its arguments:
// the chart does not change while the tests run, and the same values are
// rendered by several tests (the defaults by six), each a helm process.
var renders struct {
	mu   sync.Mutex
	done map[string]*render
}

// render is one helm template run; done closes when out and err are set.
type render struct {
	done chan struct{}
	out  string
	err  error
}

// helmTemplate renders the chart as release cnibox in kube-system with
// args (--set ...): its output, or helm's error with its stderr. Each
// distinct args is rendered once per process (a file named by -f is read
// once: the tests write each values file once).
func helmTemplate(t *testing.T, args ...string) (string, error) {
	t.Helper()
	helm := helmBinary(t)
	key := strings.Join(args, "\x00")
	renders.mu.Lock()
	if renders.done == nil {
		renders.done = map[string]*render{}
	}
	r, ok := renders.done[key]
	if !ok {
		r = &render{done: make(chan struct{})}
		renders.done[key] = r
	}
	renders.mu.Unlock()
	if ok {
		<-r.done
		return r.out, r.err
	}
	defer close(r.done)
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(helm, append([]string{"template", "cnibox", chartDir, "--namespace", "kube-system"}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		r.err = fmt.Errorf("helm template %s: %w: %s", strings.Join(args, " "), err, stderr.String())
		return "", r.err
	}
	r.out = stdout.String()
	return r.out, nil
}

// templates renders each of argss at once (helm processes side by side,
// each waiting on its own start): the outputs, or the errors, in order.
func templates(t *testing.T, argss ...[]string) ([]string, []error) {
	t.Helper()
	helmBinary(t) // skips or fails here, not in a goroutine
	outs, errs := make([]string, len(argss)), make([]error, len(argss))
	var wg sync.WaitGroup
	for i, args := range argss {
		wg.Go(func() { outs[i], errs[i] = helmTemplate(t, args...) })
	}
	wg.Wait()
	return outs, errs
}

// mustTemplates is templates failing the test on any error.
func mustTemplates(t *testing.T, argss ...[]string) []string {
	t.Helper()
	outs, errs := templates(t, argss...)
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return outs
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
// besides; its crds/ are the CRDs here, as they are here.
func TestChartDefaultsAreTheManifest(t *testing.T) {
	want := objects(t, "cnibox.yaml", readFile(t, "cnibox.yaml"))
	sameObjects(t, "the chart's defaults", chartObjects(t), want)

	for k, v := range objects(t, "cnibox-dhcp.yaml", readFile(t, "cnibox-dhcp.yaml")) {
		want[k] = v
	}
	sameObjects(t, "the chart with dhcp.enabled", chartObjects(t, "--set", "dhcp.enabled=true"), want)

	for _, crd := range []string{"nad-crd.yaml", "whereabouts-crds.yaml", "staged-policies-crds.yaml", "multi-networkpolicy-crd.yaml", "egressgateway-crd.yaml", "loadbalancerippool-crd.yaml"} {
		if readFile(t, filepath.Join(chartDir, "crds", crd)) != readFile(t, crd) {
			t.Errorf("%s/crds/%s is not deploy/kubernetes/%s: copy it there", chartDir, crd, crd)
		}
	}
}

// checksumKey is the annotation of the agent's pod template that holds
// the ConfigMap's checksum (helm upgrade with a changed ConfigMap rolls the
// agents); the manifest has none.
const checksumKey = "checksum/config"

// chartObjects is the chart's output for args, by object as objects
// gives it, with the DaemonSet cnibox's checksum annotation left out (the
// test fails if it is missing).
func chartObjects(t *testing.T, args ...string) map[string]any {
	t.Helper()
	objs := objects(t, "helm template", mustTemplate(t, args...))
	if _, sum := dropChecksum(objs); len(sum) != 64 {
		t.Errorf("the DaemonSet cnibox's pod template has no %s annotation of 64 hex digits: %q", checksumKey, sum)
	}
	return objs
}

// dropChecksum removes the checksum annotation from the DaemonSet cnibox's
// pod template in objs (and the annotations with it if it was the only
// one) and returns that pod template's metadata and the checksum.
func dropChecksum(objs map[string]any) (map[string]any, string) {
	ds, _ := objs["DaemonSet kube-system/cnibox"].(map[string]any)
	spec, _ := ds["spec"].(map[string]any)
	tmpl, _ := spec["template"].(map[string]any)
	meta, _ := tmpl["metadata"].(map[string]any)
	ann, _ := meta["annotations"].(map[string]any)
	sum, _ := ann[checksumKey].(string)
	delete(ann, checksumKey)
	if ann != nil && len(ann) == 0 {
		delete(meta, "annotations")
	}
	return meta, sum
}

// renderChart writes the chart's output for args where the manifest tests
// read: cnibox.yaml (the chart without dhcp), cnibox-dhcp.yaml (its dhcp
// DaemonSet alone) and cnibox-multus.yaml (the chart in mode multus), and
// points eachDoc there until the test ends.
func renderChart(t *testing.T, args ...string) {
	t.Helper()
	dir := t.TempDir()
	outs := mustTemplates(t, append(slices.Clip(args), "--set", "dhcp.enabled=false"),
		append(slices.Clip(args), "--set", "dhcp.enabled=true", "--show-only", "templates/dhcp.yaml"),
		append(slices.Clip(args), "--set", "mode=multus,dhcp.enabled=false"))
	files := map[string]string{"cnibox.yaml": outs[0], "cnibox-dhcp.yaml": outs[1], "cnibox-multus.yaml": outs[2]}
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
		"MultusRBAC": TestMultusRBAC, "MultusDaemonSet": TestMultusDaemonSet, "MultusCommands": TestMultusCommands,
		"MultusInstallStep": TestMultusInstallStep, "PoliciesAlike": TestPoliciesAlike,
	} {
		t.Run("defaults/"+name, test)
	}
	renderChart(t, "--set", "podAPI=false,clusterIPAM.enabled=false,ipMasq=false,networkPolicy.enabled=false")
	t.Run("featuresOff/RBAC", TestRBAC)
	t.Run("featuresOff/MultusRBAC", TestMultusRBAC)
	t.Run("featuresOff/PodSecurity", TestPodSecurity)
	if cmd := loadMultus(t).ds.Spec.Template.Spec.Containers[0].Command; slices.Contains(cmd, "--cluster-ipam") {
		t.Errorf("featuresOff: the multus agent still has --cluster-ipam: %v", cmd)
	}
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

// TestChartMultusIsTheManifest: the chart in mode multus renders the
// objects of cnibox-multus.yaml, field for field, and none of the
// primary's; its values reach the multus DaemonSet; dhcp.enabled beside it
// (a second dhcp daemon) is refused, naming the value.
func TestChartMultusIsTheManifest(t *testing.T) {
	want := objects(t, "cnibox-multus.yaml", readFile(t, "cnibox-multus.yaml"))
	sameObjects(t, "the chart in mode multus", objects(t, "helm template", mustTemplate(t, "--set", "mode=multus")), want)

	renderChart(t, "--set", "multus.nadTrustedNamespaces={kube-system,net-admin},clusterIPAM.namespace=ipam,cni.binDir=/usr/libexec/cni",
		"--set", "image.tag=v9,multus.resources.limits.memory=80Mi,dhcp.resources.limits.memory=30Mi,nodeSelector.pool=edge")
	m := loadMultus(t)
	spec := m.ds.Spec.Template.Spec
	cmd := spec.Containers[0].Command
	for _, want := range []string{"--nad-trusted-namespaces=kube-system,net-admin", "--cluster-ipam-namespace=ipam", "--pod-api-only", "--multus-conf-dir=/host/etc/cni/net.d"} {
		if !slices.Contains(cmd, want) {
			t.Errorf("the multus agent's command %v lacks %s", cmd, want)
		}
	}
	if q := spec.Containers[0].Resources.Limits[corev1.ResourceMemory]; q.String() != "80Mi" {
		t.Errorf("the multus agent's memory limit %s, want 80Mi", q.String())
	}
	if q := spec.Containers[1].Resources.Limits[corev1.ResourceMemory]; q.String() != "30Mi" {
		t.Errorf("the dhcp container's memory limit %s, want 30Mi", q.String())
	}
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		if c.Image != "ghcr.io/cnibox/cnibox:v9" {
			t.Errorf("container %s: image %s", c.Name, c.Image)
		}
	}
	for _, v := range spec.Volumes {
		if v.Name == "cni-bin" && (v.HostPath == nil || v.HostPath.Path != "/usr/libexec/cni") {
			t.Errorf("volume cni-bin %+v, want the host's /usr/libexec/cni", v.VolumeSource)
		}
	}
	if spec.NodeSelector["pool"] != "edge" {
		t.Errorf("nodeSelector %v", spec.NodeSelector)
	}
	if out := mustTemplate(t, "--set", "mode=multus,multus.namespaceIsolation=false"); strings.Contains(out, "--multus-namespace-isolation") || strings.Contains(out, "--multus-global-namespaces") {
		t.Errorf("multus.namespaceIsolation=false: the agent still gets the isolation flags")
	}
	if _, err := helmTemplate(t, "--set", "mode=multus,dhcp.enabled=true"); err == nil || !strings.Contains(err.Error(), "dhcp.enabled") {
		t.Errorf("mode multus with dhcp.enabled: %v, want a refusal naming dhcp.enabled", err)
	}
}

// TestChartConfigChecksum: the agent's pod template carries the
// ConfigMap's checksum, so that helm upgrade with a changed net-conf.json
// rolls the agents (a new pod template) and one that changes nothing of
// the ConfigMap (the image) does not change it.
func TestChartConfigChecksum(t *testing.T) {
	sum := func(args ...string) string {
		t.Helper()
		_, s := dropChecksum(objects(t, "helm template", mustTemplate(t, args...)))
		if len(s) != 64 {
			t.Fatalf("%v: no checksum annotation: %q", args, s)
		}
		return s
	}
	changes := []string{"podCIDR=10.10.0.0/16", "backend.type=host-gw", "mtu=1400", "apiServer.host=192.0.2.1"}
	argss := [][]string{nil, {"--set", "image.tag=v2,resources.limits.memory=1Gi"}}
	for _, set := range changes {
		argss = append(argss, []string{"--set", set})
	}
	templates(t, argss...) // at once; sum reads them back
	base := sum()
	for _, set := range changes {
		if sum("--set", set) == base {
			t.Errorf("--set %s changes the ConfigMap but not the checksum: helm upgrade would not roll the agents", set)
		}
	}
	if sum("--set", "image.tag=v2,resources.limits.memory=1Gi") != base {
		t.Error("a change outside the ConfigMap changed its checksum")
	}
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
	type refusal struct{ set, field string }
	var (
		argss [][]string
		cases []refusal
	)
	for _, c := range []refusal{
		{"backend.tpye=vxlan", "tpye"},
		{"imgae.tag=v1", "imgae"},
		{"backend.type=udp", "type"},
		{"mtu=big", "mtu"},
		{"podCIDR=10.244.0.0", "podCIDR"},
		{"image.digest=deadbeef", "digest"},
		{"clusterIPAM.enable=false", "enable"},
		{"mode=secondary", "mode"},
		{"multus.nadTrustedNamespace=default", "nadTrustedNamespace"},
		{"multus.nadTrustedNamespaces={Default}", "nadTrustedNamespaces"},
	} {
		argss = append(argss, []string{"--set", c.set})
		cases = append(cases, c)
	}
	_, errs := templates(t, argss...)
	for i, c := range cases {
		err := errs[i]
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

// TestChartMultiNetworkPolicies: networkPolicy.multiNetworkPolicies renders
// what the plain manifest gets from multi-network-policies.yaml and
// multi-network-policies-patch.yaml (the patch applied as kubectl patch
// applies it), object for object; without podAPI the chart refuses it,
// naming both; secondaryNetworks sets the ConfigMap's key the install
// step reads.
func TestChartMultiNetworkPolicies(t *testing.T) {
	want := objects(t, "cnibox.yaml", readFile(t, "cnibox.yaml"))
	for k, v := range objects(t, "multi-network-policies.yaml", readFile(t, "multi-network-policies.yaml")) {
		want[k] = v
	}
	const dsKey = "DaemonSet kube-system/cnibox"
	orig, err := json.Marshal(want[dsKey])
	if err != nil {
		t.Fatal(err)
	}
	patch, err := yaml.YAMLToJSON([]byte(readFile(t, "multi-network-policies-patch.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	merged, err := strategicpatch.StrategicMergePatch(orig, patch, appsv1.DaemonSet{})
	if err != nil {
		t.Fatal(err)
	}
	var ds map[string]any
	if err := json.Unmarshal(merged, &ds); err != nil {
		t.Fatal(err)
	}
	want[dsKey] = ds
	sameObjects(t, "the chart with networkPolicy.multiNetworkPolicies", chartObjects(t, "--set", "networkPolicy.multiNetworkPolicies=true"), want)

	_, err = helmTemplate(t, "--set", "networkPolicy.multiNetworkPolicies=true,podAPI=false")
	if err == nil || !strings.Contains(err.Error(), "multiNetworkPolicies needs podAPI") {
		t.Errorf("multiNetworkPolicies without podAPI: %v, want a refusal naming both", err)
	}
	renderChart(t, "--set", "secondaryNetworks=true")
	if v := load(t).cm.Data["secondary-networks"]; v != "true" {
		t.Errorf("secondaryNetworks: the ConfigMap's secondary-networks is %q", v)
	}
}

// TestChartServiceProxy: serviceProxy.enabled turns on the agent's
// Services proxy (--service-proxy, with --nodeport-addresses and
// --cleanup-kube-proxy when set) and
// binds its ClusterRole; the defaults have neither, and the liveness probe
// asks /livez (kube-proxy's liveness with the proxy, /healthz without).
func TestChartServiceProxy(t *testing.T) {
	renderChart(t, "--set", "serviceProxy.enabled=true,serviceProxy.nodePortAddresses=192.0.2.0/24,serviceProxy.cleanupKubeProxy=true")
	m := load(t)
	c := m.ds.Spec.Template.Spec.Containers[0]
	for _, want := range []string{"--service-proxy", "--nodeport-addresses=192.0.2.0/24", "--cleanup-kube-proxy", "--proc-sys-dir=/host/proc/sys"} {
		if !slices.Contains(c.Command, want) {
			t.Errorf("agent command %v lacks %s", c.Command, want)
		}
	}
	// kube-proxy's conntrack timeouts: the container's /proc/sys is
	// read-only, the host's /proc/sys/net mounted writable is not
	if !slices.ContainsFunc(c.VolumeMounts, func(v corev1.VolumeMount) bool {
		return v.Name == "proc-sys-net" && v.MountPath == "/host/proc/sys/net" && !v.ReadOnly
	}) || !slices.ContainsFunc(m.ds.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool {
		return v.Name == "proc-sys-net" && v.HostPath != nil && v.HostPath.Path == "/proc/sys/net"
	}) {
		t.Errorf("serviceProxy.enabled: no writable mount of the host's /proc/sys/net at /host/proc/sys/net: %+v", c.VolumeMounts)
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/livez" {
		t.Errorf("liveness probe %+v, want /livez", c.LivenessProbe)
	}
	if _, ok := loadRBAC(t, "cnibox.yaml").clusterRoles["cnibox-service-proxy"]; !ok {
		t.Error("serviceProxy.enabled: no ClusterRole cnibox-service-proxy")
	}
	t.Run("RBAC", TestRBAC) // the role's rules and binding, exactly
	renderChart(t)
	if slices.ContainsFunc(load(t).ds.Spec.Template.Spec.Containers[0].Command, func(a string) bool {
		return strings.HasPrefix(a, "--service-proxy") || strings.HasPrefix(a, "--nodeport-addresses") || strings.HasPrefix(a, "--cleanup-kube-proxy") || strings.HasPrefix(a, "--proc-sys-dir")
	}) {
		t.Error("the defaults turn the Services proxy on")
	}
}

// TestChartLoadBalancerAnnounce: loadBalancerAnnounce.enabled turns on the
// agent's announcements (--lb-announce) and binds their ClusterRole (the
// Leases are the egress Role's); the defaults have neither.
func TestChartLoadBalancerAnnounce(t *testing.T) {
	renderChart(t, "--set", "loadBalancerAnnounce.enabled=true")
	if cmd := load(t).ds.Spec.Template.Spec.Containers[0].Command; !slices.Contains(cmd, "--lb-announce") {
		t.Errorf("agent command %v lacks --lb-announce", cmd)
	}
	if _, ok := loadRBAC(t, "cnibox.yaml").clusterRoles["cnibox-lb-announce"]; !ok {
		t.Error("loadBalancerAnnounce.enabled: no ClusterRole cnibox-lb-announce")
	}
	t.Run("RBAC", TestRBAC) // the roles' rules and bindings, exactly
	renderChart(t)
	if slices.Contains(load(t).ds.Spec.Template.Spec.Containers[0].Command, "--lb-announce") {
		t.Error("the defaults turn the LoadBalancer announcements on")
	}
	t.Run("defaults/RBAC", TestRBAC)
}

// TestChartLoadBalancerIPAM: loadBalancerIPAM.enabled turns on the agent's
// LoadBalancer IPAM (--lb-ipam) and binds its ClusterRole and its Role of
// the Lease; the defaults have neither.
func TestChartLoadBalancerIPAM(t *testing.T) {
	renderChart(t, "--set", "loadBalancerIPAM.enabled=true")
	if cmd := load(t).ds.Spec.Template.Spec.Containers[0].Command; !slices.Contains(cmd, "--lb-ipam") {
		t.Errorf("agent command %v lacks --lb-ipam", cmd)
	}
	r := loadRBAC(t, "cnibox.yaml")
	if _, ok := r.clusterRoles["cnibox-lb-ipam"]; !ok {
		t.Error("loadBalancerIPAM.enabled: no ClusterRole cnibox-lb-ipam")
	}
	if _, ok := r.roles["cnibox-lb-ipam"]; !ok {
		t.Error("loadBalancerIPAM.enabled: no Role cnibox-lb-ipam")
	}
	t.Run("RBAC", TestRBAC) // the roles' rules and bindings, exactly
	renderChart(t)
	if slices.Contains(load(t).ds.Spec.Template.Spec.Containers[0].Command, "--lb-ipam") {
		t.Error("the defaults turn the LoadBalancer IPAM on")
	}
	t.Run("defaults/RBAC", TestRBAC)
}
