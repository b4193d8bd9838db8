//go:build kube

package node

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cnibox/cnibox/test/internal/flanneld"
)

// chartDir is cnibox's Helm chart.
const chartDir = "../../deploy/helm/cnibox"

// helm runs a real helm (CNIBOX_HELM, deploy/helm/helm.sh's) against a
// node's cluster, with its cache and config in the node's directory.
type helm struct {
	n   *node
	bin string
}

// run runs helm with args in the node's network namespace (the API server
// is on its loopback) and returns its stdout; an error carries stderr.
func (h helm) run(args ...string) (string, error) {
	a := h.n.api
	cmd := exec.Command("nsenter", append([]string{"-t", strconv.Itoa(a.init), "-n", h.bin, "--kubeconfig", a.kubeconfig}, args...)...)
	home := filepath.Join(a.dir, "helm")
	cmd.Env = append(cmd.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	return run(cmd, "")
}

func (h helm) must(args ...string) string {
	h.n.t.Helper()
	out, err := h.run(args...)
	if err != nil {
		h.n.t.Fatalf("helm %s: %v", strings.Join(args, " "), err)
	}
	h.n.t.Logf("helm %s:\n%s", args[0], strings.TrimSpace(out))
	return out
}

// imageValues are the chart's image values for ref, NAME:TAG@DIGEST or
// NAME:TAG.
func imageValues(ref string) []string {
	nameTag, digest, _ := strings.Cut(ref, "@")
	i := strings.LastIndex(nameTag, ":")
	return []string{"--set", "image.repository=" + nameTag[:i], "--set", "image.tag=" + nameTag[i+1:], "--set", "image.digest=" + digest}
}

// TestKubeNodeHelm is the real-node test of cnibox's chart with a real
// helm: helm install (the image of make image, pushed to a registry on the
// node's loopback and pulled by the kubelet, the node's CNI dirs and the
// API server's address as values, nothing else changed) brings the node
// Ready with pods talking and installs the CRDs; helm upgrade to a new
// image and helm rollback to the first keep pod-a's pings to pod-b
// answered and the node's lease; helm uninstall removes cnibox's objects
// but leaves the CRDs, the running pods and the node's files.
func TestKubeNodeHelm(t *testing.T) {
	h := helm{bin: env(t, "CNIBOX_HELM", "helm v3 (deploy/helm/helm.sh)")}
	imageTar := env(t, "CNIBOX_IMAGE_TAR", "make image's archive (bin/cnibox-image.tar)")
	manifest := env(t, "CNIBOX_MANIFEST", "make image's manifest (bin/cnibox.yaml), for the image's name")
	start := time.Now()
	n := startNode(t)
	h.n = n
	// the manifest the chart's defaults equal (deploy/kubernetes'
	// TestChartDefaultsAreTheManifest), for what the checks need: the
	// image, the conflist, the Network
	d := render(t, n, manifest)
	bb := filepath.Join(n.dir, "busybox.tar")
	writeBusyboxImage(t, bb, busyboxRef)
	n.ctr("images", "import", bb)
	// the image through a registry: pushed, then pulled by the kubelet
	d.image = registryImage(t, n, imageTar, d.image)
	if images := n.ctr("images", "ls", "-q"); strings.Contains(images, ctrName(d.image)) {
		t.Fatalf("the node has %s before the install: it would not be pulled", d.image)
	}

	release := []string{"cnibox", chartDir, "--namespace", "kube-system"}
	var cidr netip.Prefix
	step(t, "helm install: the DaemonSet installs cnibox and the node turns Ready", func() {
		h.must(append(append([]string{"install"}, release...), append(imageValues(d.image),
			"--set", "cni.binDir="+n.hostDir("/opt/cni/bin"), "--set", "cni.confDir="+n.hostDir("/etc/cni/net.d"),
			"--set", "apiServer.host=127.0.0.1", "--set-string", "apiServer.port="+apiPort,
			"--wait", n.timeout())...)...)
		n.must("wait", "--for=condition=Ready", "node/"+nodeName, n.timeout())
		// helm's --wait may see the new DaemonSet before its controller
		// does: wait for the agent's readiness (lease held) as install does
		n.must("-n", "kube-system", "rollout", "status", "ds/cnibox", n.timeout())
		checkConflist(t, n, d.cniConf)
		if images := n.ctr("images", "ls", "-q"); !strings.Contains(images, ctrName(d.image)+"\n") {
			t.Fatalf("the node did not pull %s from the registry: it has\n%s", d.image, images)
		}
		for _, crd := range []string{"network-attachment-definitions.k8s.cni.cncf.io", "ippools.whereabouts.cni.cncf.io"} {
			n.crdEstablished(crd)
		}
		cidr = podCIDR(t, n, d)
	})
	step(t, "pods get addresses in the podCIDR and reach each other", func() {
		startPods(t, n, cidr, nil, "pod-a", "pod-b")
		mustPing(t, n, "pod-a", "pod-b")
	})
	step(t, "helm upgrade to a new image keeps running pods reachable", func() {
		next := retag(n, d, "-helm")
		rolloutWith(t, n, next, "pod-c", cidr, func() {
			h.must(append(append([]string{"upgrade"}, release...), append([]string{"--reuse-values"}, imageValues(next)...)...)...)
		})
	})
	step(t, "helm rollback to the first release keeps running pods reachable", func() {
		rolloutWith(t, n, d.image, "pod-d", cidr, func() { h.must("rollback", "cnibox", "1", "--namespace", "kube-system") })
		if hist := h.must("history", "cnibox", "--namespace", "kube-system"); strings.Count(hist, "\n") != 4 {
			t.Errorf("helm history: want revisions 1 to 3:\n%s", hist)
		}
	})
	step(t, "helm uninstall leaves the CRDs, the node's running pods and its files", func() {
		uninstallWith(t, n, "helm uninstall", func() error {
			_, err := h.run("uninstall", "cnibox", "--namespace", "kube-system", "--wait", n.timeout())
			return err
		})
		for _, o := range []string{"clusterrole/cnibox", "validatingadmissionpolicy/cnibox", "-n kube-system configmap/cnibox"} {
			if out, err := n.kubectl(append(append([]string{"get"}, strings.Fields(o)...), "--ignore-not-found", "-o", "name")...); err != nil || out != "" {
				t.Errorf("after helm uninstall, %s: %q %v", o, out, err)
			}
		}
		for _, crd := range []string{"network-attachment-definitions.k8s.cni.cncf.io", "ippools.whereabouts.cni.cncf.io"} {
			n.must("get", "crd", crd)
		}
	})
	t.Logf("the Helm real-node test took %v", time.Since(start).Round(time.Second))
}

// TestKubeNodeFlannelHelm is TestKubeNodeFlannel driven by Helm: flannel
// v0.28.9's own chart (chart/kube-flannel of its module, as released) on
// three nodes with real flanneld (helm install, the backend its only
// value), then helm upgrade --reuse-values with its image values
// (flannel.image and flannel.flannel_cni.image) pointed at cnibox's image,
// and back to flannel's: every pod keeps its address and its pings through
// both moves, each node its lease (moveFlannel's checks). On host-gw (a
// value the chart must pass on: vxlan is its default), the backend
// TestKubeNodeFlannel, on vxlan, leaves to it: the same checks, each
// backend once (a cluster is ~225 s).
func TestKubeNodeFlannelHelm(t *testing.T) {
	bin := env(t, "CNIBOX_HELM", "helm v3 (deploy/helm/helm.sh)")
	cniboxTar := env(t, "CNIBOX_IMAGE_TAR", "make image's archive (bin/cnibox-image.tar)")
	// the chart names an image REPOSITORY:TAG; the archive names it so too
	cniboxImage, _, _ := strings.Cut(deploymentOf(t, env(t, "CNIBOX_MANIFEST", "make image's manifest (bin/cnibox.yaml)")).image, "@")
	kubeBinaries(t)
	chart, err := flanneld.ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	flannelTars := writeFlannelImages(t, t.TempDir())
	set := func(values map[string]string) []string {
		var args []string
		for k, v := range values {
			args = append(args, "--set", k+"="+v)
		}
		return args
	}
	// the chart's values for an image of each of its two: the CNI plugin's
	// (the install-cni-plugin container) and flannel's (install-cni and
	// kube-flannel)
	imageValues := func(images map[string]string) map[string]string {
		v := map[string]string{}
		for prefix, container := range map[string]string{"flannel.flannel_cni.image": "install-cni-plugin", "flannel.image": "kube-flannel"} {
			i := strings.LastIndex(images[container], ":")
			v[prefix+".repository"], v[prefix+".tag"] = images[container][:i], images[container][i+1:]
		}
		return v
	}
	for _, b := range flannelBackends {
		if b.typ != "host-gw" {
			continue
		}
		t.Run(b.typ, func(t *testing.T) {
			moveFlannel(t, b, flannelDeploy{
				what: "flannel's chart",
				install: func(c *cluster) {
					h := helm{n: c.node, bin: bin}
					h.must(append([]string{"install", "flannel", chart, "--namespace", flannelNS, "--create-namespace"},
						set(map[string]string{"flannel.backend": b.typ})...)...)
				},
				setImages: func(c *cluster, images map[string]string) {
					h := helm{n: c.node, bin: bin}
					h.must(append([]string{"upgrade", "flannel", chart, "--namespace", flannelNS, "--reuse-values"}, set(imageValues(images))...)...)
				},
			}, append(flannelTars, cniboxTar), cniboxImage)
		})
	}
}

// nodeRegistry is where registryImage serves the image, on the node's
// loopback (its own network namespace: the port is the node's).
const nodeRegistry = "127.0.0.1:5000"

// registryImage runs Debian's docker-registry on the node's loopback,
// pushes the archive there with deploy/image push (make push's tool), and
// returns the image's reference there by ref's tag and digest (the push
// keeps the image manifest's digest): the kubelet pulls it through
// containerd's CRI (plain HTTP: a loopback registry) instead of an import.
func registryImage(t *testing.T, n *node, archive, ref string) string {
	t.Helper()
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		t.Fatalf("docker-registry: %v (make deps installs Debian's)", err)
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n",
		filepath.Join(dir, "data"), nodeRegistry)), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(n.init)
	reg := exec.Command("nsenter", "-t", pid, "-n", bin, "serve", conf)
	reg.Stdout, reg.Stderr = logf, logf
	reg.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := reg.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		reg.Process.Kill()
		reg.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("docker-registry log:\n%s", b)
		}
	})
	push := filepath.Join(dir, "image")
	build := exec.Command("go", "build", "-o", push, "../../deploy/image")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./deploy/image: %v\n%s", err, out)
	}
	n.poll("the node's registry answers", func() error {
		_, err := run(exec.Command("nsenter", "-t", pid, "-n", "curl", "-sf", "http://"+nodeRegistry+"/v2/"), "")
		return err
	})
	nameTag, digest, _ := strings.Cut(ref, "@")
	to := nodeRegistry + "/cnibox/cnibox" + nameTag[strings.LastIndex(nameTag, ":"):]
	out, err := run(exec.Command("nsenter", "-t", pid, "-n", push, "push", "-ref", to, archive), "")
	if err != nil {
		t.Fatalf("image push -ref %s %s: %v", to, archive, err)
	}
	t.Logf("%s", strings.TrimSpace(out))
	return to + "@" + digest
}
