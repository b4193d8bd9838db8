//go:build kube

package node

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestKubeNodeCluster is cnibox's own manifest on three nodes: (d) pods on
// different nodes reach each other; a node's agent restarted (its pod
// deleted) keeps its pods reachable; a node deleted from the cluster
// disappears from every other node's routes, neighbours and FDB; (e) a node
// whose FORWARD policy is DROP (iptables-nft, in that node's namespace)
// still forwards the cluster network.
func TestKubeNodeCluster(t *testing.T) {
	imageTar := env(t, "CNIBOX_IMAGE_TAR", "make image's archive (bin/cnibox-image.tar)")
	d := deploymentOf(t, env(t, "CNIBOX_MANIFEST", "make image's manifest (bin/cnibox.yaml)"))
	start := time.Now()
	c := startCluster(t, 3)
	c.importImages(imageTar)
	n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]
	var pods []string
	step(t, "(e) node-2's FORWARD policy is DROP (iptables-nft, its namespace only)", func() {
		n2.mustOnNode("iptables-nft", "-P", "FORWARD", "DROP")
		if p := forwardPolicy(t, n2); p != "DROP" {
			t.Fatalf("node-2's FORWARD policy is %q after iptables -P FORWARD DROP", p)
		}
	})
	step(t, "(d) kubectl apply: the nodes turn Ready, pods on every node reach each other (through node-2's DROP)", func() {
		if out, err := c.kubectlIn(d.yaml, "apply", "-f", "-"); err != nil {
			t.Fatalf("kubectl apply -f the manifest: %v", err)
		} else {
			t.Logf("kubectl apply -f:\n%s", strings.TrimSpace(out))
		}
		c.must("wait", "--for=condition=Ready", "node", "--all", c.timeout())
		c.must("-n", "kube-system", "rollout", "status", "ds/cnibox", c.timeout())
		pods = c.startPodsOn("d", c.nodes...)
		c.pingMesh(pods...)
		if p := forwardPolicy(t, n2); p != "DROP" {
			t.Fatalf("node-2's FORWARD policy is %q: the test wants it DROP throughout", p)
		}
	})
	step(t, "(d) node-1's agent restarted: its pods stay reachable", func() {
		lease := subnetEnv(t, n1)
		agent := strings.TrimSpace(c.must("-n", "kube-system", "get", "pods", "-l", "app=cnibox",
			"--field-selector", "spec.nodeName="+n1.name, "-o", "jsonpath={.items[*].metadata.name}"))
		ps := c.startPings(pods...)
		c.must("-n", "kube-system", "delete", "pod", agent, "--wait", c.timeout())
		c.poll("a new agent Ready on node-1", func() error {
			out, err := c.kubectl("-n", "kube-system", "get", "pods", "-l", "app=cnibox", "--field-selector", "spec.nodeName="+n1.name,
				"-o", `jsonpath={range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
			if err != nil {
				return err
			}
			if f := strings.Fields(out); len(f) != 2 || f[0] == agent || f[1] != "True" {
				return fmt.Errorf("node-1's agent pods: %q", out)
			}
			return nil
		})
		c.stopPings("agent restart", ps)
		if now := subnetEnv(t, n1); !bytes.Equal(now, lease) {
			t.Errorf("node-1's subnet.env changed through the restart:\n%s\nwas\n%s", now, lease)
		}
		c.pingMesh(pods...)
	})
	step(t, "(d) node-3 deleted from the cluster: gone from the other nodes' routes, neighbours and FDB", func() {
		cidr := c.podCIDR(n3)
		peer := overlayPeer{subnet: cidr, vtep: cidr.Addr(), underlay: netip.MustParseAddr(n3.ip)}
		for _, n := range []*node{n1, n2} {
			if left := peer.in(t, n); len(left) != 3 {
				t.Fatalf("%s does not have node-3 as a peer before the delete (has %v): the test cannot tell it goes", n.name, left)
			}
		}
		n3.stop()
		c.must("delete", "node", n3.name, "--wait", c.timeout())
		for _, n := range []*node{n1, n2} {
			c.poll(n.name+" forgets node-3", func() error {
				if left := peer.in(t, n); len(left) > 0 {
					return fmt.Errorf("still has %v", left)
				}
				return nil
			})
		}
		c.pingMesh(pods[0], pods[1])
	})
	t.Logf("the three-node cnibox test took %v", time.Since(start).Round(time.Second))
}

// mustOnNode runs a command in the node's network and mount namespaces.
func (n *node) mustOnNode(args ...string) string {
	n.t.Helper()
	out, err := n.onNode(args...)
	if err != nil {
		n.t.Fatalf("%s on %s: %v", strings.Join(args, " "), n.name, err)
	}
	return out
}

// forwardPolicy is the policy of iptables-nft's filter FORWARD chain in
// the node's namespace.
func forwardPolicy(t *testing.T, n *node) string {
	t.Helper()
	for _, line := range strings.Split(n.mustOnNode("iptables-nft", "-S", "FORWARD"), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "-P" && f[1] == "FORWARD" {
			return f[2]
		}
	}
	return ""
}

// overlayPeer is what a node programs for another node's subnet on the
// VXLAN device: a route to the subnet via the peer's VTEP address, the
// VTEP's neighbour entry, and an FDB entry to the peer's underlay address.
type overlayPeer struct {
	subnet   netip.Prefix
	vtep     netip.Addr
	underlay netip.Addr
}

// in lists which of the route, neighbour and FDB entry the node has.
func (p overlayPeer) in(t *testing.T, n *node) []string {
	t.Helper()
	var routes []struct {
		Dst, Gateway, Dev string
	}
	var neighs []struct {
		Dst string `json:"dst"`
		Dev string `json:"dev"`
	}
	var fdb []struct {
		Dst string `json:"dst"`
	}
	for _, q := range []struct {
		args []string
		v    any
	}{
		{[]string{"ip", "-j", "route", "show"}, &routes},
		{[]string{"ip", "-j", "neigh", "show", "dev", "flannel.1"}, &neighs},
		{[]string{"bridge", "-j", "fdb", "show", "dev", "flannel.1"}, &fdb},
	} {
		out := n.mustOnNode(q.args...)
		if strings.TrimSpace(out) == "" {
			continue // nothing to list
		}
		if err := json.Unmarshal([]byte(out), q.v); err != nil {
			t.Fatalf("%s on %s: %v\n%s", strings.Join(q.args, " "), n.name, err, out)
		}
	}
	var has []string
	for _, r := range routes {
		if r.Dst == p.subnet.String() {
			has = append(has, "route "+r.Dst+" via "+r.Gateway+" dev "+r.Dev)
		}
	}
	for _, e := range neighs {
		if e.Dst == p.vtep.String() {
			has = append(has, "neighbour "+e.Dst)
		}
	}
	for _, e := range fdb {
		if e.Dst == p.underlay.String() {
			has = append(has, "fdb dst "+e.Dst)
		}
	}
	return has
}
