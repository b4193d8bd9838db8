package kubernetes

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// nadCRD is the part of a CustomResourceDefinition the test reads (the
// module does not link apiextensions' types).
type nadCRD struct {
	Metadata struct{ Name string }
	Spec     struct {
		Group, Scope string
		Names        struct {
			Plural, Kind string
			ShortNames   []string `json:"shortNames"`
		}
		Versions []struct {
			Name            string
			Served, Storage bool
			Schema          struct {
				OpenAPIV3Schema schemaProps `json:"openAPIV3Schema"`
			}
		}
	}
}

type schemaProps struct {
	Type       string
	Properties map[string]schemaProps
}

// multusManifest is cnibox-multus.yaml decoded.
type multusManifest struct {
	sa *corev1.ServiceAccount
	ds *appsv1.DaemonSet
}

// loadMultus decodes every document of cnibox-multus.yaml strictly.
func loadMultus(t *testing.T) multusManifest {
	t.Helper()
	var m multusManifest
	eachDoc(t, "cnibox-multus.yaml", func(kind, doc string) any {
		switch kind {
		case "ServiceAccount":
			m.sa = &corev1.ServiceAccount{}
			return m.sa
		case "DaemonSet":
			m.ds = &appsv1.DaemonSet{}
			return m.ds
		}
		if o := (&rbacObjects{}).decode(kind); o != nil {
			return o // loadRBAC reads them
		}
		t.Fatalf("unexpected kind %s", kind)
		return nil
	})
	if m.sa == nil || m.ds == nil {
		t.Fatalf("cnibox-multus.yaml lacks an object: %+v", m)
	}
	return m
}

// manifestDir is where eachDoc reads the manifests: this directory, or the
// chart's output (TestChartHoldsTheRules).
var manifestDir = "."

// eachDoc calls obj for every document of the manifest file with its kind
// and decodes the document strictly (an unknown or misspelt field fails)
// into what obj returns (nil: obj has read it).
func eachDoc(t *testing.T, file string, obj func(kind, doc string) any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(manifestDir, file))
	if err != nil {
		t.Fatal(err)
	}
	for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("%s document %d: %v", file, i, err)
		}
		if meta.Kind == "" {
			continue // the leading comment
		}
		if o := obj(meta.Kind, doc); o != nil {
			if err := yaml.UnmarshalStrict([]byte(doc), o); err != nil {
				t.Fatalf("%s document %d (%s): %v", file, i, meta.Kind, err)
			}
		}
	}
}

// TestMultusCRD: the NAD CRD, in nad-crd.yaml, is the one Multus installs:
// its group, names, one served and stored v1 whose spec.config is a
// string.
func TestMultusCRD(t *testing.T) {
	var c *nadCRD
	eachDoc(t, "nad-crd.yaml", func(kind, doc string) any {
		if kind != "CustomResourceDefinition" || c != nil {
			t.Fatalf("nad-crd.yaml: a %s besides the one CRD", kind)
		}
		c = &nadCRD{}
		if err := yaml.Unmarshal([]byte(doc), c); err != nil {
			t.Fatalf("the CRD: %v", err)
		}
		return nil
	})
	if c == nil {
		t.Fatal("nad-crd.yaml holds no CRD")
	}
	s := c.Spec
	if c.Metadata.Name != "network-attachment-definitions.k8s.cni.cncf.io" || s.Group != "k8s.cni.cncf.io" || s.Scope != "Namespaced" ||
		s.Names.Plural != "network-attachment-definitions" || s.Names.Kind != "NetworkAttachmentDefinition" ||
		!slices.Equal(s.Names.ShortNames, []string{"nad", "net-attach-def"}) {
		t.Errorf("CRD %s: %+v", c.Metadata.Name, s)
	}
	if len(s.Versions) != 1 || s.Versions[0].Name != "v1" || !s.Versions[0].Served || !s.Versions[0].Storage {
		t.Fatalf("CRD versions %+v: want v1 served and stored", s.Versions)
	}
	if cfg := s.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["config"]; cfg.Type != "string" {
		t.Errorf("spec.config is %q, want string", cfg.Type)
	}
}

// TestNoCRDWithTheDaemonSets: neither cnibox.yaml nor cnibox-multus.yaml
// holds a CRD (the NAD CRD, whereabouts' three), so that `kubectl delete -f`
// of either (uninstalling cnibox, moving back to Multus or whereabouts) does
// not delete every NetworkAttachmentDefinition or IPPool of the cluster
// with it (docs/deploy.md): they are in nad-crd.yaml and
// whereabouts-crds.yaml.
func TestNoCRDWithTheDaemonSets(t *testing.T) {
	for _, file := range []string{"cnibox.yaml", "cnibox-multus.yaml", "cnibox-dhcp.yaml"} {
		data, err := os.ReadFile(filepath.Join(manifestDir, file))
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
			var meta struct {
				Kind     string
				Metadata struct{ Name string }
			}
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s document %d: %v", file, i, err)
			}
			if meta.Kind == "CustomResourceDefinition" {
				t.Errorf("%s holds the CRD %s: kubectl delete -f %s would delete every object of its kind; it belongs in nad-crd.yaml or whereabouts-crds.yaml", file, meta.Metadata.Name, file)
			}
		}
	}
}

// TestMultusDaemonSet: the install step never replaces a plugin the node
// has and does not fail on one (--keep-foreign, no conflist: the
// primary's stay); the agent serves the
// pod API only and writes the config in /etc/cni/net.d; every mount is a
// volume; the dhcp daemon's node paths are under its -hostprefix.
func TestMultusDaemonSet(t *testing.T) {
	m := loadMultus(t)
	spec := m.ds.Spec.Template.Spec
	if !spec.HostNetwork || len(spec.Tolerations) != 1 || spec.Tolerations[0].Operator != corev1.TolerationOpExists {
		t.Errorf("hostNetwork %v, tolerations %+v: want the node's network and every taint", spec.HostNetwork, spec.Tolerations)
	}
	if len(spec.InitContainers) != 1 || strings.Join(spec.InitContainers[0].Command, " ") != "/usr/local/bin/cnibox install --dir=/host/opt/cni/bin --keep-foreign" {
		t.Errorf("install step %+v: want cnibox install --dir=/host/opt/cni/bin --keep-foreign alone", spec.InitContainers)
	}
	hostPaths := map[string]string{} // "" for a volume that is not the host's
	for _, v := range spec.Volumes {
		hostPaths[v.Name] = ""
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	mounts := map[string]map[string]string{} // container -> mountPath -> host path
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		mounts[c.Name] = map[string]string{}
		for _, vm := range c.VolumeMounts {
			p, ok := hostPaths[vm.Name]
			if !ok {
				t.Errorf("container %s mounts %s, not a volume", c.Name, vm.Name)
			}
			mounts[c.Name][vm.MountPath] = p
		}
		if c.Image != "ghcr.io/cnibox/cnibox:dev" {
			t.Errorf("container %s: image %s", c.Name, c.Image)
		}
	}
	if len(spec.Containers) != 2 || spec.Containers[0].Name != "agent" || spec.Containers[1].Name != "dhcp" {
		t.Fatalf("containers %v: want agent and dhcp", spec.Containers)
	}
	agent := spec.Containers[0]
	if !slices.Contains(agent.Command, "--pod-api-only") || !slices.Contains(agent.Command, "--cluster-ipam") ||
		!slices.Contains(agent.Command, "--multus-conf-dir=/host/etc/cni/net.d") {
		t.Errorf("agent command %v", agent.Command)
	}
	// issue 48: namespace isolation on, kube-system's NADs still reachable.
	if !slices.Contains(agent.Command, "--multus-namespace-isolation") || !slices.Contains(agent.Command, "--multus-global-namespaces=default,kube-system") {
		t.Errorf("agent command %v: want --multus-namespace-isolation and --multus-global-namespaces=default,kube-system", agent.Command)
	}
	if mounts["agent"]["/host/etc/cni/net.d"] != "/etc/cni/net.d" || mounts["agent"]["/run/cnibox"] != "/run/cnibox" ||
		mounts["agent"]["/var/lib/kubelet/pod-resources"] != "/var/lib/kubelet/pod-resources" || mounts["agent"]["/var/lib/cnibox"] != "/var/lib/cnibox" {
		t.Errorf("agent mounts %v", mounts["agent"])
	}
	dhcp := spec.Containers[1]
	if strings.Join(dhcp.Command, " ") != "/usr/local/bin/cnibox-dhcp -hostprefix=/host" {
		t.Errorf("dhcp command %v", dhcp.Command)
	}
	// what the daemon reaches under /host: its socket, the pods'
	// namespaces as containerd names them, the store
	for _, p := range []string{"/run/cni/dhcp.sock", "/var/run/netns/cni-1", "/run/netns/cni-1", "/var/lib/cnibox/cnibox.db"} {
		// the node's /var/run is a link to /run
		onHost := strings.Replace(p, "/var/run/", "/run/", 1)
		ok := false
		for mp, hp := range mounts["dhcp"] {
			if rest, found := strings.CutPrefix("/host"+p, mp+"/"); found && hp != "" {
				ok = rest != "" && hp+"/"+rest == onHost
			}
		}
		if !ok {
			t.Errorf("the dhcp daemon does not reach the node's %s under /host: mounts %v", p, mounts["dhcp"])
		}
	}
	if caps := dhcp.SecurityContext.Capabilities.Add; !slices.Equal(caps, []corev1.Capability{"NET_ADMIN", "NET_RAW", "SYS_ADMIN"}) {
		t.Errorf("dhcp capabilities %v", caps)
	}
}

// TestMultusCommands: the agent and the dhcp daemon know every flag the
// manifest gives them (the built binaries' -help).
func TestMultusCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the agent and the dhcp daemon")
	}
	spec := loadMultus(t).ds.Spec.Template.Spec
	for _, c := range spec.Containers {
		name := filepath.Base(c.Command[0])
		pkg := map[string]string{"cnibox-agent-kube": "cmd/cnibox-agent", "cnibox-dhcp": "cmd/cnibox-dhcp"}[name]
		if pkg == "" {
			t.Fatalf("container %s runs %s", c.Name, c.Command[0])
		}
		bin := madeBinary(t, name, pkg)
		help, _ := exec.Command(bin, "-help").CombinedOutput()
		for _, a := range c.Command[1:] {
			flag, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if !strings.Contains(string(help), "  -"+flag+" ") && !strings.Contains(string(help), "  -"+flag+"\n") {
				t.Errorf("%s: the manifest gives -%s, which it does not know:\n%s", name, flag, help)
			}
		}
	}
}

// TestMakeImageRendersEveryManifest: make image renders each manifest of
// this directory that names an image (cnibox.yaml, cnibox-multus.yaml; not
// nad-crd.yaml) into bin/ under its own name with the image it builds, and
// the one image there is the Makefile's IMAGE, as in cnibox.yaml.
func TestMakeImageRendersEveryManifest(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	recipe := regexp.MustCompile(`(?ms)^image:[^\n]*\n((?:\t[^\n]*\n)+)`).FindSubmatch(mk)
	if recipe == nil {
		t.Fatal("no image: target in the Makefile")
	}
	rendered := map[string]string{}
	for _, m := range regexp.MustCompile(`-manifest\s+(\S+)\s+(?:\\\s*)?-manifest-out\s+(\S+)`).FindAllSubmatch(recipe[1], -1) {
		rendered[string(m[1])] = string(m[2])
	}
	yamls, err := filepath.Glob("*.yaml")
	if err != nil || len(yamls) < 2 {
		t.Fatalf("manifests here: %v %v", yamls, err)
	}
	for _, y := range yamls {
		data, err := os.ReadFile(y)
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`(?m)^\s*(-\s+)?image:`).Match(data) {
			continue
		}
		if out := rendered["deploy/kubernetes/"+y]; out != "bin/"+y {
			t.Errorf("make image renders deploy/kubernetes/%s into %q, want bin/%s (the image: fields set to the image it builds)", y, out, y)
		}
	}
	name := regexp.MustCompile(`(?m)^IMAGE\s*\?=\s*(\S+)$`).FindSubmatch(mk)
	if name == nil {
		t.Fatal("no IMAGE ?= in the Makefile")
	}
	spec := loadMultus(t).ds.Spec.Template.Spec
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		if !strings.HasPrefix(c.Image, string(name[1])+":") {
			t.Errorf("cnibox-multus.yaml: container %s: image %s, want %s:TAG (the Makefile's IMAGE)", c.Name, c.Image, name[1])
		}
	}
}

// TestMultusInstallStep runs the init container's command against the
// built cnibox over a bin dir that holds a primary CNI's plugins (a
// reference bridge and a link to another binary): it succeeds, leaves them
// as they were, links every other role to cnibox, and writes no conflist.
func TestMultusInstallStep(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cnibox")
	}
	ic := loadMultus(t).ds.Spec.Template.Spec.InitContainers[0]
	root := t.TempDir()
	bin := cniboxBinary(t, root)
	binDir := filepath.Join(root, "opt-cni-bin")
	os.MkdirAll(binDir, 0o755)
	if err := os.WriteFile(filepath.Join(binDir, "bridge"), []byte("the reference bridge"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr/lib/cni/portmap", filepath.Join(binDir, "portmap")); err != nil {
		t.Fatal(err)
	}
	if ic.Command[0] != "/usr/local/bin/cnibox" || !slices.Contains(ic.Command, "--dir=/host/opt/cni/bin") {
		t.Fatalf("install command %v", ic.Command)
	}
	args := slices.Clone(ic.Command[1:])
	args[slices.Index(args, "--dir=/host/opt/cni/bin")] = "--dir=" + binDir
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("cnibox %v over a primary's plugins: %v\n%s", args, err, out)
	}
	if b, err := os.ReadFile(filepath.Join(binDir, "bridge")); err != nil || string(b) != "the reference bridge" {
		t.Errorf("the primary's bridge changed: %q %v", b, err)
	}
	if l, err := os.Readlink(filepath.Join(binDir, "portmap")); err != nil || l != "/usr/lib/cni/portmap" {
		t.Errorf("the primary's portmap link changed: %q %v", l, err)
	}
	for _, role := range []string{"multi", "multus-shim", "macvlan", "host-device", "static", "dhcp"} {
		if link, err := os.Readlink(filepath.Join(binDir, role)); err != nil || link != "cnibox" {
			t.Errorf("%s -> %q (%v), want the relative link cnibox", role, link, err)
		}
	}
	if ents, _ := filepath.Glob(filepath.Join(root, "*", "*.conflist")); len(ents) > 0 {
		t.Errorf("the install step wrote a conflist: %v", ents)
	}
}
