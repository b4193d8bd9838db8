package overlay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/netops"
)

// TestVXLANCluster is the multi-node test: three nodes on one etcd,
// two pods each, every pod reaching every other across the overlay; then a
// node that leaves, an agent restart, stale entries at start-up and a VTEP
// MAC change.
func TestVXLANCluster(t *testing.T) {
	c := newCluster(t, 3)
	c.startEtcd()
	c.put(etcdPrefix+"/config", `{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan"}}`)
	n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]

	// Before its agent holds a lease, a node refuses pods: STATUS 50, ADD 11.
	if err := n1.status(); codeOf(err) != 50 {
		t.Fatalf("STATUS before the agent runs = %v; want code 50", err)
	}
	if _, err := n1.addPod("early"); codeOf(err) != 11 || !strings.Contains(err.Error(), "cnibox-agent") {
		t.Fatalf("ADD before the agent runs = %v; want code 11 naming cnibox-agent", err)
	}

	for _, n := range c.nodes {
		n.startAgent()
	}
	c.converge(c.nodes...)

	// Each node leased its own /24 and wrote flannel's subnet file.
	subnets := map[netip.Prefix]bool{}
	for _, n := range c.nodes {
		s, _ := n.state()
		if !netip.MustParsePrefix("10.244.0.0/16").Contains(s.Lease.Subnet.Addr()) || s.Lease.Subnet.Bits() != 24 || subnets[s.Lease.Subnet] {
			t.Fatalf("%s leased %v; want a /24 of 10.244.0.0/16 no other node has", n.name, s.Lease.Subnet)
		}
		subnets[s.Lease.Subnet] = true
		env, err := os.ReadFile(n.subnetFile)
		must(t, err)
		first := netip.PrefixFrom(s.Lease.Subnet.Addr().Next(), 24)
		want := "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=" + first.String() + "\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"
		if string(env) != want {
			t.Errorf("%s subnet file:\n%s\nwant:\n%s", n.name, env, want)
		}
		if err := n.status(); err != nil {
			t.Errorf("%s STATUS with a running agent: %v", n.name, err)
		}
	}

	// The CLI reads the agent's state from the store and checks the kernel.
	var st struct {
		Subnet       netip.Prefix `json:"subnet"`
		Ready        bool         `json:"ready"`
		AgentRunning bool         `json:"agentRunning"`
		Peers        int          `json:"peers"`
		Devices      []struct {
			Name   string `json:"name"`
			Up     bool   `json:"up"`
			MTU    int    `json:"mtu"`
			Exists bool   `json:"exists"`
		} `json:"devices"`
	}
	n1.cli(&st, "overlay", "status")
	s1, _ := n1.state()
	if st.Subnet != s1.Lease.Subnet || !st.Ready || !st.AgentRunning || st.Peers != 2 || len(st.Devices) != 1 ||
		!st.Devices[0].Exists || !st.Devices[0].Up || st.Devices[0].MTU != 1450 {
		t.Errorf("cnibox overlay status on node1 = %+v; want subnet %s, ready, agent running, 2 peers, flannel.1 up with mtu 1450", st, s1.Lease.Subnet)
	}
	var peers []struct {
		Subnet netip.Prefix `json:"subnet"`
		OK     bool         `json:"ok"`
	}
	n1.cli(&peers, "overlay", "peers")
	if len(peers) != 2 || !peers[0].OK || !peers[1].OK {
		t.Errorf("cnibox overlay peers on node1 = %+v; want 2 peers, all programmed", peers)
	}

	// Two pods per node; every pod reaches every pod on the other nodes.
	var pods []*pod
	for _, n := range c.nodes {
		for _, name := range []string{"a", "b"} {
			p, err := n.addPod(name)
			if err != nil {
				t.Fatalf("ADD %s on %s: %v\nagent log:\n%s", name, n.name, err, n.log())
			}
			s, _ := n.state()
			if !s.Lease.Subnet.Contains(p.ip) {
				t.Fatalf("pod %s got %s outside its node's subnet %s", p.id, p.ip, s.Lease.Subnet)
			}
			pods = append(pods, p)
		}
	}
	for _, from := range pods {
		for _, to := range pods {
			if from.node == to.node {
				continue
			}
			if err := reachable(t, from, to); err != nil {
				t.Errorf("%s (%s) cannot reach %s (%s): %v", from.id, from.ip, to.id, to.ip, err)
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// A node leaves: its agent stops and its lease is deleted. The others
	// remove its route, neighbour and FDB entry.
	s3, _ := n3.state()
	n3.stopAgent()
	del(t, c, s3.Lease.Subnet)
	c.converge(n1, n2)
	for _, n := range []*node{n1, n2} {
		k, err := n.kernel()
		must(t, err)
		if _, ok := k.routes[s3.Lease.Subnet]; ok {
			t.Errorf("%s still routes to the removed node's %s", n.name, s3.Lease.Subnet)
		}
		for _, e := range k.fdb {
			if e.MAC.String() == s3.Lease.VTEPMAC {
				t.Errorf("%s still has the removed node's FDB entry %s", n.name, e)
			}
		}
	}
	if err := reachable(t, pods[0], pods[2]); err != nil {
		t.Errorf("after a node left, node1 -> node2 pods: %v", err)
	}

	// A restarted agent keeps its subnet and its VTEP MAC.
	s2, _ := n2.state()
	n2.stopAgent()
	// SIGTERM left the kernel state in place: the pods still talk.
	if err := reachable(t, pods[0], pods[2]); err != nil {
		t.Errorf("with node2's agent stopped, node1 -> node2 pods: %v", err)
	}
	n2.startAgent()
	c.converge(n1, n2)
	r2, _ := n2.state()
	if r2.Lease.Subnet != s2.Lease.Subnet || r2.Lease.VTEPMAC != s2.Lease.VTEPMAC {
		t.Errorf("after a restart node2 has %s vtep %s; had %s vtep %s", r2.Lease.Subnet, r2.Lease.VTEPMAC, s2.Lease.Subnet, s2.Lease.VTEPMAC)
	}
	if err := reachable(t, pods[2], pods[0]); err != nil {
		t.Errorf("after node2's restart, node2 -> node1 pods: %v", err)
	}

	// Stale entries planted while the agent is down go at its start-up.
	n1.stopAgent()
	h1 := openH(t, n1.ns)
	staleMAC, _ := net.ParseMAC("02:de:ad:be:ef:01")
	// A /24 of the network that no node leased: the gateway of a leased
	// one is a node's own address (its flannel.1's), where the kernel
	// refuses an onlink route (EINVAL; one run in ~128 leased 250).
	stale := netip.MustParsePrefix("10.244.250.0/24")
	for subnets[stale] {
		stale = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, stale.Addr().As4()[2] + 1, 0}), 24)
	}
	staleGW := stale.Addr()
	must(t, h1.EnsureNeigh(device, staleGW, staleMAC))
	must(t, h1.EnsureFDB(device, staleMAC, netip.MustParseAddr("192.168.77.250")))
	must(t, h1.EnsureRoute(netops.Route{Dst: stale, GW: staleGW, Dev: device, Onlink: true}))
	// An old FDB entry of a live peer, pointing at a wrong address.
	must(t, h1.EnsureFDB(device, mustMAC(t, r2.Lease.VTEPMAC), netip.MustParseAddr("192.168.77.251")))
	n1.startAgent()
	c.converge(n1, n2)

	// node2 gets a new VTEP MAC (its device changed while its agent was
	// down): node1 drops the FDB entry of the old MAC.
	n2.stopAgent()
	h2 := openH(t, n2.ns)
	newMAC, _ := net.ParseMAC("02:0a:0b:0c:0d:0e")
	must(t, h2.SetMAC(device, newMAC))
	n2.startAgent()
	c.converge(n1, n2)
	k1, err := n1.kernel()
	must(t, err)
	for _, e := range k1.fdb {
		if e.MAC.String() == r2.Lease.VTEPMAC {
			t.Errorf("node1 keeps the FDB entry of node2's old VTEP MAC: %s", e)
		}
	}
	if nb := k1.neighs[r2.Lease.Subnet.Addr()]; nb.MAC.String() != newMAC.String() {
		t.Errorf("node1's neighbour for node2 = %v; want lladdr %s", nb, newMAC)
	}
	if err := reachable(t, pods[0], pods[2]); err != nil {
		t.Errorf("after node2's MAC change, node1 -> node2 pods: %v", err)
	}

	// The device comes back when someone deletes it.
	must(t, h1.DeleteLink(device))
	c.converge(n1, n2)
	if err := reachable(t, pods[1], pods[3]); err != nil {
		t.Errorf("after node1's device was re-created: %v", err)
	}

	// DEL, twice, on the nodes that still run.
	for _, p := range pods[:4] {
		for range 2 {
			if err := p.node.delPod(p); err != nil {
				t.Errorf("DEL %s: %v", p.id, err)
			}
		}
	}
}

func del(t *testing.T, c *cluster, sn netip.Prefix) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5e9)
	defer cancel()
	key := etcdPrefix + "/subnets/" + strings.ReplaceAll(sn.String(), "/", "-")
	resp, err := c.etcd.Delete(ctx, key)
	if err != nil || resp.Deleted != 1 {
		t.Fatalf("delete lease %s: %v (deleted %d)", key, err, resp.Deleted)
	}
}

func mustMAC(t *testing.T, s string) net.HardwareAddr {
	t.Helper()
	mac, err := net.ParseMAC(s)
	must(t, err)
	return mac
}

// codeOf returns the CNI error code of err, 0 for nil or an uncoded error.
func codeOf(err error) uint {
	var te *types.Error
	if errors.As(err, &te) {
		return te.Code
	}
	return 0
}

// TestVXLANDualStack: with EnableIPv6 each node has a second device
// (flannel-v6.1) and pods reach each other over IPv4 and IPv6.
func TestVXLANDualStack(t *testing.T) {
	c := newCluster(t, 2)
	for i, n := range c.nodes {
		h := openH(t, n.ns)
		must(t, h.EnsureAddr("eth0", netip.MustParsePrefix(fmt.Sprintf("fd77::%d/64", 11+i)), netops.AddrOpts{NoDAD: true}))
	}
	c.startEtcd()
	c.put(etcdPrefix+"/config", `{"Network": "10.244.0.0/16", "EnableIPv6": true, "IPv6Network": "fd00:10:244::/56", "Backend": {"Type": "vxlan"}}`)
	for _, n := range c.nodes {
		n.startAgent()
	}
	c.converge(c.nodes...)

	var pods []*pod
	for _, n := range c.nodes {
		p, err := n.addPod("a")
		if err != nil {
			t.Fatalf("ADD on %s: %v\nagent log:\n%s", n.name, err, n.log())
		}
		s, _ := n.state()
		if s.Lease.Device6 != "flannel-v6.1" || !s.Lease.Subnet6.Contains(p.ip6) || s.Lease.Subnet6.Bits() != 64 || s.Lease.MTU != 1430 {
			t.Fatalf("%s: lease %+v, pod IPv6 %s; want device flannel-v6.1, a /64 holding the pod, MTU 1430", n.name, s.Lease, p.ip6)
		}
		// VXLAN costs 50 bytes over IPv4 and 70 over IPv6 (flanneld takes
		// 50 for both): flannel.1 1450, flannel-v6.1 1430.
		h := openH(t, n.ns)
		for dev, want := range map[string]int{"flannel.1": 1450, "flannel-v6.1": 1430} {
			if l, err := h.LinkByName(dev); err != nil || l.MTU != want {
				t.Errorf("%s: %s MTU %d (%v), want %d", n.name, dev, l.MTU, err, want)
			}
		}
		pods = append(pods, p)
	}
	// Nothing is stale on a fresh start: the kernel's own entries (the /128
	// route of the device's IPv6 address, multicast neighbours) stay.
	for _, n := range c.nodes {
		if log := n.log(); strings.Contains(log, "removing a stale") {
			t.Errorf("%s: the agent removed entries on a fresh start:\n%s", n.name, log)
		}
	}
	for _, v6 := range []bool{false, true} {
		for _, pair := range [][2]*pod{{pods[0], pods[1]}, {pods[1], pods[0]}} {
			from, to := *pair[0], *pair[1]
			if v6 {
				to.ip = to.ip6
			}
			if err := reachable(t, &from, &to); err != nil {
				t.Errorf("%s cannot reach %s at %s: %v\n%s\n%s\n%s", from.id, to.id, to.ip, err, c.nodes[0].log(), c.nodes[1].log(), netDump(c.nodes[0].ns, c.nodes[1].ns, from.ns, to.ns))
			}
		}
	}
}
