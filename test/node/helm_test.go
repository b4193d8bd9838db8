//go:build kube

package node

import (
	"net/netip"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
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
// helm: helm install (the image of make image, the node's CNI dirs and the
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
	n.ctr("images", "import", imageTar)

	release := []string{"cnibox", chartDir, "--namespace", "kube-system"}
	var cidr netip.Prefix
	step(t, "helm install: the DaemonSet installs cnibox and the node turns Ready", func() {
		h.must(append(append([]string{"install"}, release...), append(imageValues(d.image),
			"--set", "cni.binDir="+n.hostDir("/opt/cni/bin"), "--set", "cni.confDir="+n.hostDir("/etc/cni/net.d"),
			"--set", "apiServer.host=127.0.0.1", "--set-string", "apiServer.port="+apiPort,
			"--wait", n.timeout())...)...)
		n.must("wait", "--for=condition=Ready", "node/"+nodeName, n.timeout())
		checkConflist(t, n, d.cniConf)
		for _, crd := range []string{"network-attachment-definitions.k8s.cni.cncf.io", "ippools.whereabouts.cni.cncf.io"} {
			n.must("wait", "--for=condition=Established", "crd/"+crd, n.timeout())
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
