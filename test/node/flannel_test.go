//go:build kube

package node

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// flannelManifest is flannel's stock manifest, Documentation/kube-flannel.yml
// of v0.28.9 as fetched, unchanged: the nodes' CNI dirs are at the host
// paths it names (node.sh join), and flannel's images are built under the
// names it gives (writeFlannelImages).
const flannelManifest = "testdata/kube-flannel.yml"

// flannelDS is the manifest's DaemonSet.
const (
	flannelNS  = "kube-flannel"
	flannelDS  = "kube-flannel-ds"
	flannelSel = "app=flannel"
)

// flannelBackend is a backend TestKubeNodeFlannel runs flannel's manifest
// on: the Type an operator writes into net-conf.json in the manifest's
// ConfigMap (nothing else changes), and how a node on it routes another
// node's podCIDR.
type flannelBackend struct {
	typ string
	// route is the one route a node has to peer's podCIDR: via which
	// address, on which device.
	route func(peer *node, podCIDR netip.Prefix) (via, dev string)
	// device is the backend's device on every node ("" if it has none).
	device string
}

// flannelBackends are flannel's backends this machine's kernel has
// (wireguard and ipip are tested beside flanneld in test/overlay, on the
// 6.1 guest): vxlan, as the manifest has it, routes a peer's podCIDR via
// its VTEP address (the podCIDR's first address) on flannel.1; host-gw via
// the peer node's own address on its NIC, eth0, with no device of its own.
var flannelBackends = []flannelBackend{
	{typ: "vxlan", device: "flannel.1", route: func(_ *node, podCIDR netip.Prefix) (string, string) {
		return podCIDR.Addr().String(), "flannel.1"
	}},
	{typ: "host-gw", route: func(peer *node, _ netip.Prefix) (string, string) {
		return peer.ip, "eth0"
	}},
}

// withBackend is flannel's manifest with typ as net-conf.json's
// Backend.Type: the one line an operator changes to choose a backend.
func withBackend(t *testing.T, manifest []byte, typ string) string {
	t.Helper()
	const line = `"Type": "vxlan"`
	if n := bytes.Count(manifest, []byte(line)); n != 1 {
		t.Fatalf("%s has %d lines %s, want the one in net-conf.json", flannelManifest, n, line)
	}
	return strings.Replace(string(manifest), line, `"Type": "`+typ+`"`, 1)
}

// TestKubeNodeFlannel is the move from flannel to cnibox and back, on
// three nodes, on vxlan (the manifest as fetched; host-gw, one line
// changed, is TestKubeNodeFlannelHelm's, so that each backend and each
// way of installing flannel runs once): (a) flannel's
// manifest with a real flanneld brings the nodes Ready and pods on
// different nodes reach each other; (b) with pings running between pods on
// different nodes, `kubectl set image` moves the DaemonSet to cnibox's
// image, the nodes roll one by one through a mixed cluster, no pod pair
// goes without an answer for more than 2 s, and each node keeps its lease;
// new pods get addresses no pod holds and reach the old ones, and pods
// that flannel's plugins set up are deleted by cnibox's without a
// leftover; (c) the same back to flannel's images, whose plugins then
// delete the pods cnibox's set up. After each step every node is on the
// backend: its Node's annotations name it, and it routes each other node's
// podCIDR the backend's way, with one route (checkBackend).
func TestKubeNodeFlannel(t *testing.T) {
	cniboxTar := env(t, "CNIBOX_IMAGE_TAR", "make image's archive (bin/cnibox-image.tar)")
	cniboxImage := deploymentOf(t, env(t, "CNIBOX_MANIFEST", "make image's manifest (bin/cnibox.yaml)")).image
	kubeBinaries(t)
	start := time.Now()
	// built in the host's namespaces, before any node starts
	flannelTars := writeFlannelImages(t, t.TempDir())
	t.Logf("flannel's images ready after %v", time.Since(start).Round(time.Second))
	manifest, err := os.ReadFile(flannelManifest)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range flannelBackends {
		if b.typ != "vxlan" {
			continue
		}
		t.Run(b.typ, func(t *testing.T) {
			manifest := withBackend(t, manifest, b.typ)
			moveFlannel(t, b, flannelDeploy{
				what: "flannel's manifest",
				install: func(c *cluster) {
					if out, err := c.kubectlIn(manifest, "apply", "-f", "-"); err != nil {
						t.Fatalf("kubectl apply -f %s (Backend.Type %s): %v", flannelManifest, b.typ, err)
					} else {
						t.Logf("kubectl apply -f %s (Backend.Type %s):\n%s", flannelManifest, b.typ, strings.TrimSpace(out))
					}
				},
				setImages: func(c *cluster, images map[string]string) {
					args := []string{"-n", flannelNS, "set", "image", "ds/" + flannelDS}
					for container, img := range images {
						args = append(args, container+"="+img)
					}
					c.must(args...)
				},
			}, append(flannelTars, cniboxTar), cniboxImage)
		})
	}
}

// flannelDeploy is how a test puts flannel's DaemonSet on the cluster
// (install) and moves its containers to other images (setImages: by
// container name): flannel's manifest with kubectl, or flannel's chart with
// helm.
type flannelDeploy struct {
	what      string
	install   func(c *cluster)
	setImages func(c *cluster, images map[string]string)
}

// moveFlannel is TestKubeNodeFlannel on one backend: d deploys flannel on
// it, images are the archives of flannel's and cnibox's images, and
// cniboxImage the name d gives cnibox's.
func moveFlannel(t *testing.T, b flannelBackend, d flannelDeploy, images []string, cniboxImage string) {
	start := time.Now()
	c := startCluster(t, 3)
	c.importImages(images...)
	var pods, before []string
	leases := map[*node][]byte{}
	step(t, "(a) "+d.what+" and flanneld on "+b.typ+": the nodes turn Ready, pods across nodes reach each other", func() {
		d.install(c)
		c.must("wait", "--for=condition=Ready", "node", "--all", c.timeout())
		c.must("-n", flannelNS, "rollout", "status", "ds/"+flannelDS, c.timeout())
		for _, n := range c.nodes {
			if plugin := pluginOf(t, n); plugin != "flannel's" {
				t.Fatalf("%s: /opt/cni/bin/flannel is %s, want flannel's own", n.name, plugin)
			}
			leases[n] = subnetEnv(t, n)
		}
		pods = c.startPodsOn("a", c.nodes...)
		c.pingMesh(pods...)
		c.checkBackend("flanneld", b)
		before = c.startPodsOn("x", c.nodes...)
	})
	// pods are the first pods, one per node, pinging each other through
	// every move
	// before are pods the plugins being replaced set up: the new ones
	// delete them after the move.
	move := func(label, image string, images map[string]string, want string) {
		ps := c.startPings(pods...)
		d.setImages(c, images)
		states := c.watchRollout(flannelNS, flannelSel, flannelDS)
		c.stopPings(label, ps)
		from := flannelImage
		if image == flannelImage {
			from = cniboxImage
		}
		if !mixed(states, from, image) {
			t.Errorf("%s: no moment with Ready pods of both %s and %s: %v", label, from, image, states)
		}
		for _, n := range c.nodes {
			if plugin := pluginOf(t, n); plugin != want {
				t.Errorf("%s: %s's /opt/cni/bin/flannel is %s, want %s", label, n.name, plugin, want)
			}
			if now := subnetEnv(t, n); !bytes.Equal(now, leases[n]) {
				t.Errorf("%s: %s's subnet.env changed:\n%s\nwas\n%s", label, n.name, now, leases[n])
			}
		}
		c.deleteClean(label, before)
		prefix := map[string]string{cniboxImage: "b", flannelImage: "c"}[image]
		fresh := c.startPodsOn(prefix, c.nodes...)
		c.uniqueAddresses()
		c.pingFresh(pods, fresh)
		c.checkBackend(label, b)
		before = fresh
	}
	step(t, "(b) "+d.what+" moved to cnibox's image: the nodes roll one by one, pods keep reaching each other", func() {
		move("to cnibox", cniboxImage, map[string]string{"install-cni-plugin": cniboxImage, "install-cni": cniboxImage, "kube-flannel": cniboxImage}, "cnibox's")
	})
	step(t, "(c) "+d.what+" moved back to flannel's images", func() {
		move("back to flannel", flannelImage, map[string]string{"install-cni-plugin": flannelCNIImage, "install-cni": flannelImage, "kube-flannel": flannelImage}, "flannel's")
	})
	t.Logf("%s: the move from flannel and back took %v", b.typ, time.Since(start).Round(time.Second))
}

// checkBackend fails the test unless every node is on the backend as a
// user would see it: the Node's flannel annotations name the backend and
// the node's address (kubectl get node), the node has exactly one route to
// each other node's podCIDR, the backend's (b.route), and it has the
// backend's device and no other's (a host-gw node has no flannel.1), as
// `ip route` and `ip link` on the node show them.
func (c *cluster) checkBackend(label string, b flannelBackend) {
	t := c.t
	t.Helper()
	cidrs := map[*node]netip.Prefix{}
	for _, n := range c.nodes {
		var nd corev1.Node
		if err := json.Unmarshal([]byte(c.must("get", "node", n.name, "-o", "json")), &nd); err != nil {
			t.Fatal(err)
		}
		for key, want := range map[string]string{"backend-type": b.typ, "public-ip": n.ip} {
			if got := nd.Annotations["flannel.alpha.coreos.com/"+key]; got != want {
				t.Errorf("%s: node %s's annotation flannel.alpha.coreos.com/%s is %q, want %q", label, n.name, key, got, want)
			}
		}
		cidr, err := netip.ParsePrefix(nd.Spec.PodCIDR)
		if err != nil {
			t.Fatalf("node %s: podCIDR %q: %v", n.name, nd.Spec.PodCIDR, err)
		}
		cidrs[n] = cidr
	}
	devices := map[string]bool{}
	for _, fb := range flannelBackends {
		if fb.device != "" {
			devices[fb.device] = true
		}
	}
	for _, n := range c.nodes {
		var routes []struct {
			Dst, Gateway, Dev string
		}
		if err := json.Unmarshal([]byte(n.mustOnNode("ip", "-j", "route", "show")), &routes); err != nil {
			t.Fatalf("%s: ip -j route show on %s: %v", label, n.name, err)
		}
		var seen []string
		for _, peer := range c.nodes {
			if peer == n {
				continue
			}
			via, dev := b.route(peer, cidrs[peer])
			want := fmt.Sprintf("%s via %s dev %s", cidrs[peer], via, dev)
			var got []string
			for _, r := range routes {
				if r.Dst == cidrs[peer].String() {
					got = append(got, fmt.Sprintf("%s via %s dev %s", r.Dst, r.Gateway, r.Dev))
				}
			}
			if len(got) != 1 || got[0] != want {
				t.Errorf("%s: %s's routes to %s's podCIDR: %q, want %s (%s)", label, n.name, peer.name, got, want, b.typ)
			}
			seen = append(seen, got...)
		}
		var links []struct {
			Ifname string
		}
		if err := json.Unmarshal([]byte(n.mustOnNode("ip", "-j", "link", "show")), &links); err != nil {
			t.Fatalf("%s: ip -j link show on %s: %v", label, n.name, err)
		}
		has := map[string]bool{}
		for _, l := range links {
			has[l.Ifname] = true
		}
		for d := range devices {
			if has[d] != (d == b.device) {
				t.Errorf("%s: %s has a link %s: %v (%s)", label, n.name, d, has[d], b.typ)
			}
		}
		t.Logf("%s: %s routes the other podCIDRs %s", label, n.name, strings.Join(seen, ", "))
	}
}

// deleteClean deletes pods (one per node, in the nodes' order) and checks
// that the plugins now installed tore down what the others set up: the
// pod's address is free in host-local's records of cbr0, the flannel
// plugin's record of the sandbox (/var/lib/cni/flannel/<id>) is gone, and
// cni0 has a port for each pod left on the node and no more.
func (c *cluster) deleteClean(label string, pods []string) {
	t := c.t
	t.Helper()
	type gone struct {
		n       *node
		ip, box string
	}
	var want []gone
	for i, name := range pods {
		n := c.nodes[i]
		// one filter: ctr ORs separate ones, a comma ANDs
		box := strings.TrimSpace(n.ctr("containers", "ls", "-q",
			`labels."io.kubernetes.pod.name"==`+name+`,labels."io.cri-containerd.kind"==sandbox`))
		if box == "" || strings.Contains(box, "\n") {
			t.Fatalf("%s: the sandbox of pod %s on %s: %q", label, name, n.name, box)
		}
		want = append(want, gone{n, podIP(t, c.node, name).String(), box})
	}
	c.must(append([]string{"delete", "pod", c.timeout()}, pods...)...)
	for i, g := range want {
		c.poll(fmt.Sprintf("%s: %s's pod %s torn down", label, g.n.name, pods[i]), func() error {
			if _, err := g.n.nodeFile("/var/lib/cni/networks/cbr0/" + g.ip); !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("host-local's record of %s: %v", g.ip, err)
			}
			if _, err := g.n.nodeFile("/var/lib/cni/flannel/" + g.box); !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("the flannel plugin's record of sandbox %s: %v", g.box, err)
			}
			ports, err := g.n.onNode("ip", "-o", "link", "show", "master", "cni0")
			if err != nil {
				return err
			}
			var left corev1.PodList
			if err := json.Unmarshal([]byte(c.must("get", "pods", "-A", "-o", "json", "--field-selector", "spec.nodeName="+g.n.name)), &left); err != nil {
				return err
			}
			podNet := 0
			for _, p := range left.Items {
				if !p.Spec.HostNetwork {
					podNet++
				}
			}
			if got := strings.Count(ports, "\n"); got != podNet {
				return fmt.Errorf("cni0 has %d ports for %d pods:\n%s", got, podNet, ports)
			}
			return nil
		})
	}
	t.Logf("%s: %d pods set up by the other plugins deleted without a leftover", label, len(pods))
}

// deploymentOf reads make image's manifest as it is.
func deploymentOf(t *testing.T, path string) deployment {
	t.Helper()
	return render(t, nil, path)
}

// pluginOf says whose flannel plugin the node's CNI dir holds: "cnibox's"
// (the flannel role, whose version line names cnibox) or "flannel's".
func pluginOf(t *testing.T, n *node) string {
	t.Helper()
	p := filepath.Join(n.hostDir("/opt/cni/bin"), "flannel")
	cmd := exec.Command(p, "version")
	cmd.Env = []string{}
	out, _ := cmd.CombinedOutput()
	switch {
	case strings.Contains(string(out), "+cnibox"):
		return "cnibox's"
	case strings.Contains(string(out), "CNI flannel plugin"):
		return "flannel's"
	}
	t.Fatalf("%s: %s version: %q", n.name, p, out)
	return ""
}

// subnetEnv is the node's /run/flannel/subnet.env.
func subnetEnv(t *testing.T, n *node) []byte {
	t.Helper()
	data, err := n.nodeFile("/run/flannel/subnet.env")
	if err != nil {
		t.Fatal(err)
	}
	return data
}
