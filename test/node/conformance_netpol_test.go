//go:build kube

package node

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cnibox/cnibox/test/internal/kuberouter"
)

// The NetworkPolicy configurations of TestKubeConformance: Kubernetes' own
// Netpol suite (its [Feature:NetworkPolicy] specs and the policy API's) on
// cnibox's overlay with its policy engine (netpol: cnibox-vxlan, where the
// policy is on by default) and on the anchor with kube-router's policy
// controller beside flannel (netpol-anchor). The SCTP connectivity specs
// are skipped: this machine's kernel has no SCTP sockets (socket(AF_INET,
// SOCK_STREAM, IPPROTO_SCTP) answers EPROTONOSUPPORT), so their servers
// cannot listen; the specs of policies that name SCTP and probe with TCP
// run.
const (
	netpolFocus = `\[sig-network\] (Netpol|NetworkPolicy)`
	netpolSkip  = `\[Feature:SCTPConnectivity\]|\[Disruptive\]|\[Flaky\]`
)

// kubeRouterImage is the image testdata/kube-router-firewall.yaml runs.
const kubeRouterImage = "localhost/cnibox-test/kube-router:" + kuberouter.Version

// netpolBase is the network configuration a NetworkPolicy configuration
// runs on, and whether config is one.
func netpolBase(config string) (string, bool) {
	switch config {
	case "netpol":
		return "cnibox-vxlan", true
	case "netpol-anchor":
		return "anchor", true
	}
	return config, false
}

// netpolImages are the images config needs besides its network's: for
// netpol-anchor kube-router's.
func netpolImages(t *testing.T, config string) []string {
	t.Helper()
	if config != "netpol-anchor" {
		return nil
	}
	return []string{writeKubeRouterImage(t, t.TempDir())}
}

// writeKubeRouterImage writes kubeRouterImage into dir: kube-router
// (test/internal/kuberouter), Debian's iptables (nft) with its extensions
// and ipset with their libraries, over busybox. It returns its path.
func writeKubeRouterImage(t *testing.T, dir string) string {
	t.Helper()
	bin, err := kuberouter.Binary()
	if err != nil {
		t.Fatal(err)
	}
	files, links := iptablesFiles(t)
	const ipset = "/usr/sbin/ipset"
	if _, err := os.Stat(ipset); err != nil {
		t.Fatalf("%v (apt-get install ipset)", err)
	}
	files[ipset] = ipset
	withLibraries(t, files)
	files["/usr/local/bin/kube-router"] = bin
	img := hostFiles(t, files, links)
	archive := filepath.Join(dir, "kube-router-image.tar")
	// kube-router as the entrypoint: the DaemonSet gives its flags as args
	writeImageSpec(t, archive, imageSpec{refs: []string{kubeRouterImage}, entrypoint: []string{"/usr/local/bin/kube-router"}, files: img})
	return archive
}

// startNetpolAnchor runs kube-router's policy controller on every node
// (testdata/kube-router-firewall.yaml) for netpol-anchor and waits for it.
func (c *cluster) startNetpolAnchor(config string) {
	c.t.Helper()
	if config != "netpol-anchor" {
		return
	}
	data, err := os.ReadFile("testdata/kube-router-firewall.yaml")
	if err != nil {
		c.t.Fatal(err)
	}
	c.apply(string(data))
	c.must("-n", "kube-system", "rollout", "status", "ds/kube-router", c.timeout())
}
