package kubernetes

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/cnibox/cnibox/agent/netconf"
)

// manifest is cnibox.yaml decoded.
type manifest struct {
	sa *corev1.ServiceAccount
	cm *corev1.ConfigMap
	ds *appsv1.DaemonSet
	// namespaces: the egress Leases' (cnibox-egress)
	namespaces []*corev1.Namespace
}

// load decodes every document of cnibox.yaml strictly (an unknown or
// misspelt field fails) into its API type.
func load(t *testing.T) manifest {
	t.Helper()
	var m manifest
	eachDoc(t, "cnibox.yaml", func(kind, doc string) any {
		switch kind {
		case "ServiceAccount":
			m.sa = &corev1.ServiceAccount{}
			return m.sa
		case "ConfigMap":
			m.cm = &corev1.ConfigMap{}
			return m.cm
		case "DaemonSet":
			m.ds = &appsv1.DaemonSet{}
			return m.ds
		case "Namespace":
			ns := &corev1.Namespace{}
			m.namespaces = append(m.namespaces, ns)
			return ns
		}
		if o := (&rbacObjects{}).decode(kind); o != nil {
			return o // loadRBAC reads them
		}
		t.Fatalf("cnibox.yaml: unexpected kind %s", kind)
		return nil
	})
	if m.sa == nil || m.cm == nil || m.ds == nil {
		t.Fatalf("cnibox.yaml lacks an object: %+v", m)
	}
	if len(m.namespaces) != 1 || m.namespaces[0].Name != "cnibox-egress" {
		t.Fatalf("cnibox.yaml: namespaces %v; want cnibox-egress alone (the egress Leases')", m.namespaces)
	}
	return m
}

// TestConfigMap: the conflist is one cnibox install takes, and the
// net-conf.json one the agent parses.
func TestConfigMap(t *testing.T) {
	m := load(t)
	if m.cm.Name != "cnibox" || m.cm.Namespace != "kube-system" {
		t.Errorf("ConfigMap %s/%s, want kube-system/cnibox", m.cm.Namespace, m.cm.Name)
	}
	cfg, err := netconf.Parse([]byte(m.cm.Data["net-conf.json"]))
	if err != nil {
		t.Fatalf("net-conf.json: %v", err)
	}
	if cfg.Network.String() != "10.244.0.0/16" {
		t.Errorf("Network %s, want flannel's 10.244.0.0/16", cfg.Network)
	}
	for _, k := range []string{"api-server-host", "api-server-port"} {
		if _, ok := m.cm.Data[k]; ok {
			t.Errorf("%s is set by default: it is for clusters that need it", k)
		}
	}
}

// TestDaemonSet: the node-level settings the issue asks for.
func TestDaemonSet(t *testing.T) {
	m := load(t)
	ds := m.ds
	spec := ds.Spec.Template.Spec
	if ds.Namespace != "kube-system" || spec.ServiceAccountName != m.sa.Name {
		t.Errorf("DaemonSet in %s with service account %s", ds.Namespace, spec.ServiceAccountName)
	}
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType {
		t.Errorf("update strategy %s", ds.Spec.UpdateStrategy.Type)
	}
	if !spec.HostNetwork || spec.PriorityClassName != "system-node-critical" {
		t.Errorf("hostNetwork %v, priorityClassName %q", spec.HostNetwork, spec.PriorityClassName)
	}
	if !slices.ContainsFunc(spec.Tolerations, func(tol corev1.Toleration) bool {
		return tol.Operator == corev1.TolerationOpExists && tol.Key == "" && tol.Effect == ""
	}) {
		t.Errorf("tolerations %+v do not tolerate every taint", spec.Tolerations)
	}

	// One image everywhere, the one make image builds.
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`(?m)^IMAGE\s*\?=\s*(\S+)$`).FindSubmatch(mk)
	if name == nil {
		t.Fatal("no IMAGE ?= in the Makefile")
	}
	all := append(slices.Clone(spec.InitContainers), spec.Containers...)
	for _, c := range all {
		if !strings.HasPrefix(c.Image, string(name[1])+":") {
			t.Errorf("container %s: image %s, want %s:TAG (the Makefile's IMAGE)", c.Name, c.Image, name[1])
		}
		if c.Image != all[0].Image {
			t.Errorf("container %s: image %s, another has %s", c.Name, c.Image, all[0].Image)
		}
		if c.ImagePullPolicy != corev1.PullIfNotPresent && c.ImagePullPolicy != corev1.PullNever {
			t.Errorf("container %s: imagePullPolicy %q, want IfNotPresent (an imported image)", c.Name, c.ImagePullPolicy)
		}
	}

	// Mounts name declared volumes; the host paths are the ones the node's
	// CNI and the agent use.
	hostPaths := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		} else {
			hostPaths[v.Name] = ""
		}
	}
	var paths []string
	for _, p := range hostPaths {
		if p != "" {
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)
	if want := []string{"/etc/cni/net.d", "/opt/cni/bin", "/run/cnibox", "/run/flannel", "/var/lib/cnibox", "/var/lib/kubelet/pod-resources", "/var/log/cnibox"}; !slices.Equal(paths, want) {
		t.Errorf("host paths %v, want %v", paths, want)
	}
	for _, c := range all {
		for _, vm := range c.VolumeMounts {
			if _, ok := hostPaths[vm.Name]; !ok {
				t.Errorf("container %s mounts %s, which is not a volume", c.Name, vm.Name)
			}
		}
	}

	agent := spec.Containers[0]
	sc := agent.SecurityContext
	if sc == nil || sc.Capabilities == nil || (sc.Privileged != nil && *sc.Privileged) {
		t.Fatalf("agent security context %+v", sc)
	}
	if !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_ADMIN", "NET_RAW"}) {
		t.Errorf("agent capabilities %v, want NET_ADMIN and NET_RAW (docs/deploy.md says why)", sc.Capabilities.Add)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range agent.Env {
		env[e.Name] = e
	}
	for name, key := range map[string]string{"KUBERNETES_SERVICE_HOST": "api-server-host", "KUBERNETES_SERVICE_PORT": "api-server-port"} {
		e := env[name]
		if e.ValueFrom == nil || e.ValueFrom.ConfigMapKeyRef == nil || e.ValueFrom.ConfigMapKeyRef.Name != m.cm.Name ||
			e.ValueFrom.ConfigMapKeyRef.Key != key || e.ValueFrom.ConfigMapKeyRef.Optional == nil || !*e.ValueFrom.ConfigMapKeyRef.Optional {
			t.Errorf("%s: %+v, want the optional key %s of ConfigMap %s", name, e, key, m.cm.Name)
		}
	}
	if e := env["NODE_NAME"]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("NODE_NAME: %+v", e)
	}
	addr := flagValue(agent.Command, "--health-addr")
	_, port, _ := strings.Cut(addr, ":")
	for p, path := range map[*corev1.Probe]string{agent.LivenessProbe: "/livez", agent.ReadinessProbe: "/readyz"} {
		if p == nil || p.HTTPGet == nil || strconv.Itoa(p.HTTPGet.Port.IntValue()) != port || p.HTTPGet.Path != path {
			t.Errorf("probe %+v, want GET %s on the --health-addr port %q", p, path, port)
		}
	}
}

// flagValue is the value of --name=value in args.
func flagValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// pendingAgentFlags are flags the manifest gives the agent before the
// agent has them, with what brings them.
var pendingAgentFlags = map[string]string{}

// TestAgentFlags: every flag the manifest gives the agent is one the
// agent's binary knows.
func TestAgentFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the agent")
	}
	m := load(t)
	agent := m.ds.Spec.Template.Spec.Containers[0]
	if agent.Command[0] != "/usr/local/bin/cnibox-agent-kube" {
		t.Fatalf("agent command %v, want /usr/local/bin/cnibox-agent-kube (the image's build with client-go)", agent.Command)
	}
	bin := madeBinary(t, "cnibox-agent-kube", "cmd/cnibox-agent")
	help, _ := exec.Command(bin, "-help").CombinedOutput()
	for _, a := range agent.Command[1:] {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		known := strings.Contains(string(help), "  -"+name+" ") || strings.Contains(string(help), "  -"+name+"\n")
		why, pending := pendingAgentFlags[name]
		switch {
		case known && pending:
			t.Errorf("--%s is now an agent flag: remove it from pendingAgentFlags", name)
		case !known && pending:
			t.Logf("--%s: not an agent flag yet (%s)", name, why)
		case !known:
			t.Errorf("the manifest gives the agent --%s, which it does not know:\n%s", name, help)
		}
	}
}

// TestInstallStep runs the init container's command, with its mounts
// pointed at temp dirs, against the built cnibox: the binary, relative
// role links and the ConfigMap's conflist land in the "host" dirs.
func TestInstallStep(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cnibox")
	}
	m := load(t)
	spec := m.ds.Spec.Template.Spec
	if len(spec.InitContainers) != 1 {
		t.Fatalf("%d init containers, want the install step", len(spec.InitContainers))
	}
	ic := spec.InitContainers[0]
	root := t.TempDir()
	bin := cniboxBinary(t, root)
	// The container's mounts, under root.
	hostDir := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostDir[v.Name] = filepath.Join(root, "host", v.HostPath.Path)
		}
	}
	remap := map[string]string{}
	for _, vm := range ic.VolumeMounts {
		dir := filepath.Join(root, "container", vm.MountPath)
		if h, ok := hostDir[vm.Name]; ok {
			dir = h // the same directory, seen from the host
		} else {
			for k, v := range m.cm.Data {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		remap[vm.MountPath] = dir
	}
	if ic.Command[0] != "/usr/local/bin/cnibox" {
		t.Fatalf("install command %v", ic.Command)
	}
	args := slices.Clone(ic.Command[1:])
	for i, a := range args {
		for from, to := range remap {
			args[i] = strings.Replace(a, "="+from, "="+to, 1)
			if args[i] != a {
				break
			}
		}
	}
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("cnibox %v: %v\n%s", args, err, out)
	}
	binDir, confDir := hostDir["cni-bin"], hostDir["cni-conf"]
	for _, role := range []string{"flannel", "portmap", "bridge", "host-local", "multi"} {
		if link, err := os.Readlink(filepath.Join(binDir, role)); err != nil || link != "cnibox" {
			t.Errorf("%s -> %q (%v), want the relative link cnibox", role, link, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(binDir, "cnibox")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("the host's /opt/cni/bin/cnibox: %v %v", fi, err)
	}
	got, err := os.ReadFile(filepath.Join(confDir, "10-cnibox.conflist"))
	if err != nil || string(got) != m.cm.Data["cni-conf.json"] {
		t.Errorf("the host's /etc/cni/net.d/10-cnibox.conflist: %q (%v), want the ConfigMap's cni-conf.json", got, err)
	}
}

// TestWhereaboutsCRDs: whereabouts-crds.yaml carries whereabouts' three
// CRDs, and nothing else, under their names, group and version (the test in
// test/whereabouts installs them into a real API server and runs
// whereabouts' own binary on them).
func TestWhereaboutsCRDs(t *testing.T) {
	var docs, got []string
	eachDoc(t, "whereabouts-crds.yaml", func(kind, doc string) any {
		if kind != "CustomResourceDefinition" {
			t.Fatalf("whereabouts-crds.yaml: a %s besides the CRDs", kind)
		}
		docs = append(docs, doc)
		return nil
	})
	for _, doc := range docs {
		var crd struct {
			Metadata struct{ Name string }
			Spec     struct {
				Group    string
				Scope    string
				Versions []struct{ Name string }
			}
		}
		if err := yaml.Unmarshal([]byte(doc), &crd); err != nil {
			t.Fatal(err)
		}
		if crd.Spec.Group != "whereabouts.cni.cncf.io" || crd.Spec.Scope != "Namespaced" || len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != "v1alpha1" {
			t.Errorf("CRD %s: %+v", crd.Metadata.Name, crd.Spec)
		}
		got = append(got, crd.Metadata.Name)
	}
	want := []string{"ippools.whereabouts.cni.cncf.io", "overlappingrangeipreservations.whereabouts.cni.cncf.io", "nodeslicepools.whereabouts.cni.cncf.io"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("CRDs %v, want %v", got, want)
	}
}

// cniboxBinary is $CNIBOX_BIN, or cnibox built into dir.
func cniboxBinary(t *testing.T, dir string) string {
	t.Helper()
	if bin := os.Getenv("CNIBOX_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(dir, "cnibox-built")
	build := exec.Command("go", "build", "-tags", "urfave_cli_no_docs", "-o", bin, "github.com/cnibox/cnibox")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build cnibox: %v\n%s", err, out)
	}
	return bin
}
