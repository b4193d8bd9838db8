package overlay

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cnibox/cnibox/agent/lease"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/store"
)

// What the tests of the backends other than vxlan share: pods through the
// flannel role (subnet.env and a bridge delegate, as kube-flannel's
// conflist has them), the store record by the backend's key, the agent's
// metrics read inside the node's namespace.

// flannelConf makes the cluster's pods go through the flannel role with
// the node's subnet file, as an operator's kube-flannel conflist does.
func (c *cluster) flannelConf() {
	c.netConf = func(n *node) string {
		return fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "cbr0", "plugins": [
			{"type": "flannel", "subnetFile": %q, "dataDir": %q,
			 "delegate": {"hairpinMode": true, "isDefaultGateway": true}}]}`, n.subnetFile, n.dataDir+"/flannel")
	}
}

// thirdOnVXLANRole makes node3's pods go through cnibox's own role (vxlan:
// the pod side of every backend), the others' through the flannel role
// (flannelConf first).
func (c *cluster) thirdOnVXLANRole() {
	flannel := c.netConf
	c.netConf = func(n *node) string {
		if n == c.nodes[2] {
			return `{"cniVersion": "1.1.0", "name": "overlay", "plugins": [{"type": "vxlan"}]}`
		}
		return flannel(n)
	}
}

// stateOf returns what the agent mirrored into the node's store under key
// (the backend's first device, or its type when it has none).
func (n *node) stateOf(key string) (store.OverlayState, bool) {
	st, err := store.OpenWith(n.dataDir, store.Options{NoCreate: true})
	if err != nil {
		return store.OverlayState{}, false
	}
	defer st.Close()
	s, found, err := st.Overlay(key)
	if err != nil {
		n.c.t.Fatal(err)
	}
	return s, found
}

// waitReady waits until the agent of every node says ready in its store
// under key, and returns each node's subnet.
func (c *cluster) waitReady(key string, nodes ...*node) map[*node]netip.Prefix {
	c.t.Helper()
	out := map[*node]netip.Prefix{}
	deadline := time.Now().Add(waitFor)
	for _, n := range nodes {
		for {
			s, ok := n.stateOf(key)
			if ok && s.Ready {
				out[n] = s.Lease.Subnet
				break
			}
			if time.Now().After(deadline) {
				c.t.Fatalf("the agent on %s is not ready (store key %q); log:\n%s", n.name, key, n.log())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return out
}

// eventually retries check until it returns "" or the deadline passes.
func eventually(t *testing.T, what string, check func() string, nss ...string) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		msg := check()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s\n%s", what, msg, netDump(nss...))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// routesOf returns the node's IPv4 routes of dev by destination.
func routesOf(t *testing.T, ns, dev string) map[netip.Prefix]netops.Route {
	t.Helper()
	out := map[netip.Prefix]netops.Route{}
	for _, r := range nodeRoutes(t, ns, dev) {
		if r.Dst.Addr().Is4() {
			out[r.Dst] = r
		}
	}
	return out
}

// nodeRoutes returns the node's routes of dev, both families.
func nodeRoutes(t *testing.T, ns, dev string) []netops.Route {
	t.Helper()
	h, err := netops.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	rs, err := h.Routes(dev)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// metric reads one sample of the agent's /metrics at addr from inside the
// node's namespace (the connection is made there, the request sent after).
// offLinkReported waits until n's agent reports one peer off its L2
// network, at ip: its log names it, and cnibox_agent_peers_unreachable is 1.
// The agent logs the peer while it programs the others and sets the gauge
// once the whole sync is done, so the gauge may lag the log.
func offLinkReported(t *testing.T, n *node, ip string) {
	t.Helper()
	eventually(t, n.name+" reports the peer at "+ip+" off its L2 network", func() string {
		if log := n.log(); !strings.Contains(log, "not on this node's L2 network") || !strings.Contains(log, ip) {
			return "its log does not say so:\n" + log
		}
		if v, err := n.metric("127.0.0.1:9666", "cnibox_agent_peers_unreachable"); err != nil || v != 1 {
			return fmt.Sprintf("cnibox_agent_peers_unreachable = %v, %v; want 1", v, err)
		}
		return ""
	}, n.ns)
}

func (n *node) metric(addr, name string) (float64, error) {
	var conn net.Conn
	if err := nstest.Run(n.c.t, n.ns, func() error {
		var err error
		conn, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	}); err != nil {
		return 0, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET /metrics HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", addr)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name {
			return strconv.ParseFloat(f[1], 64)
		}
	}
	return 0, fmt.Errorf("no sample %s in /metrics", name)
}

// podsReachEachOther adds a pod on every node and checks that each reaches
// each on another node.
func podsReachEachOther(t *testing.T, nodes ...*node) []*pod {
	t.Helper()
	var pods []*pod
	for _, n := range nodes {
		p, err := n.addPod("p")
		if err != nil {
			t.Fatalf("ADD on %s: %v\nagent log:\n%s", n.name, err, n.log())
		}
		pods = append(pods, p)
	}
	for _, from := range pods {
		for _, to := range pods {
			if from.node != to.node {
				if err := reachable(t, from, to); err != nil {
					t.Errorf("%s (%s) cannot reach %s (%s): %v\n%s", from.id, from.ip, to.id, to.ip, err, netDump(from.node.ns, to.node.ns))
				}
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return pods
}

// TestHostGWCluster runs three cnibox nodes on host-gw over etcd: a route
// per peer via its public IP on eth0 and nothing else, pods reaching each
// other through the flannel role and the vxlan role (node3's), a node
// leaving taking its route with it, and a lease whose public IP is off the L2 network logged as an error and
// counted in cnibox_agent_peers_unreachable instead of being routed.
func TestHostGWCluster(t *testing.T) {
	c := newCluster(t, 3)
	c.startEtcd()
	c.flannelConf()
	c.thirdOnVXLANRole()
	c.put(etcdPrefix+"/config", `{"Network": "10.244.0.0/16", "Backend": {"Type": "host-gw"}}`)
	// A node on another network (a NAT or another L2 segment): host-gw
	// cannot reach it.
	c.put(etcdPrefix+"/subnets/10.244.200.0-24", `{"PublicIP":"198.51.100.7","BackendType":"host-gw"}`)
	// A vxlan node of the same cluster is ignored, as flanneld ignores it.
	c.put(etcdPrefix+"/subnets/10.244.201.0-24", `{"PublicIP":"192.168.77.99","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"0a:58:0a:f4:c9:00"}}`)
	for i, n := range c.nodes {
		n.startAgent("--health-addr", fmt.Sprintf("127.0.0.1:%d", 9666+i))
	}
	subnets := c.waitReady("host-gw", c.nodes...)

	want := func(self *node) map[netip.Prefix]netip.Addr {
		out := map[netip.Prefix]netip.Addr{}
		for _, n := range c.nodes {
			if n != self && subnets[n].IsValid() {
				out[subnets[n]] = n.ip
			}
		}
		return out
	}
	check := func(n *node, peers map[netip.Prefix]netip.Addr) func() string {
		return func() string {
			have := map[netip.Prefix]netip.Addr{}
			for dst, r := range routesOf(t, n.ns, "eth0") {
				if r.GW.IsValid() && netip.MustParsePrefix("10.244.0.0/16").Contains(dst.Addr()) {
					have[dst] = r.GW
				}
			}
			if fmt.Sprint(have) != fmt.Sprint(peers) {
				return fmt.Sprintf("%s routes into the cluster network on eth0 = %v; want %v", n.name, have, peers)
			}
			return ""
		}
	}
	for _, n := range c.nodes {
		eventually(t, "host-gw routes", check(n, want(n)), n.ns)
		env := readFile(t, n.subnetFile)
		first := netip.PrefixFrom(subnets[n].Addr().Next(), 24)
		if wantEnv := "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=" + first.String() + "\nFLANNEL_MTU=1500\nFLANNEL_IPMASQ=true\n"; env != wantEnv {
			t.Errorf("%s subnet file:\n%s\nwant (host-gw adds nothing to a packet: the interface's MTU):\n%s", n.name, env, wantEnv)
		}
	}
	// Each node published flannel's host-gw lease: its type, no data.
	for sn, l := range c.leases() {
		if sn.Addr().As4()[2] >= 200 {
			continue
		}
		if l.Attrs.BackendType != lease.BackendHostGW || len(l.Attrs.Data) != 0 {
			t.Errorf("lease %s = type %q data %s; want host-gw without data", sn, l.Attrs.BackendType, l.Attrs.Data)
		}
	}
	n1 := c.nodes[0]
	offLinkReported(t, n1, "198.51.100.7")

	// The CLI reads the record: the type, no device, every peer's route.
	var st struct {
		Type    string            `json:"type"`
		Ready   bool              `json:"ready"`
		Peers   int               `json:"peers"`
		Devices []json.RawMessage `json:"devices"`
	}
	eventually(t, "cnibox overlay status on node1", func() string {
		n1.cli(&st, "overlay", "status")
		if st.Type != "host-gw" || !st.Ready || st.Peers != 3 || len(st.Devices) != 0 {
			return fmt.Sprintf("%+v; want type host-gw, ready, 3 peers (the off-link one too), no device", st)
		}
		return ""
	})
	var peers []struct {
		Subnet netip.Prefix `json:"subnet"`
		OK     bool         `json:"ok"`
	}
	n1.cli(&peers, "overlay", "peers")
	for _, p := range peers {
		if p.OK != (p.Subnet != netip.MustParsePrefix("10.244.200.0/24")) {
			t.Errorf("cnibox overlay peers on node1: %+v; want every peer's route there but the off-link one's", peers)
		}
	}

	pods := podsReachEachOther(t, c.nodes...)

	// The off-link node leaves: the metric goes back to 0.
	del(t, c, netip.MustParsePrefix("10.244.200.0/24"))
	eventually(t, "the metric after the off-link peer left", func() string {
		if v, err := n1.metric("127.0.0.1:9666", "cnibox_agent_peers_unreachable"); err != nil || v != 0 {
			return fmt.Sprintf("cnibox_agent_peers_unreachable = %v, %v; want 0", v, err)
		}
		return ""
	})

	// node3 leaves: its agent stops, its lease goes, the others drop its
	// route; node1 and node2 still reach each other.
	n3 := c.nodes[2]
	n3.stopAgent()
	del(t, c, subnets[n3])
	delete(subnets, n3)
	for _, n := range c.nodes[:2] {
		eventually(t, "routes after node3 left", check(n, want(n)), n.ns)
	}
	if err := reachable(t, pods[0], pods[1]); err != nil {
		t.Errorf("after node3 left: %v", err)
	}

	// A route deleted by hand comes back with the next full sync; one
	// added by hand into the cluster network goes.
	h := openH(t, n1.ns)
	must(t, h.DeleteRoute(netops.Route{Dst: subnets[c.nodes[1]], Dev: "eth0"}))
	// (in a /24 no node leased: one of a node's own would replace its
	// pods' route)
	foreign := netip.MustParsePrefix("10.244.250.0/24")
	for leased := true; leased; {
		leased = false
		for _, p := range subnets {
			if p == foreign {
				leased = true
				foreign = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, foreign.Addr().As4()[2] + 1, 0}), 24)
			}
		}
	}
	must(t, h.EnsureRoute(netops.Route{Dst: foreign, GW: netip.MustParseAddr("192.168.77.50"), Dev: "eth0"}))
	n1.stopAgent()
	n1.startAgent()
	eventually(t, "routes after a restart", check(n1, want(n1)), n1.ns)

	// eth0 goes down and up: the kernel drops the routes through it, the
	// agent puts them back when it is up again (flanneld: its 10 s check).
	must(t, h.SetLinkDown("eth0"))
	eventually(t, "routes gone with eth0 down", check(n1, map[netip.Prefix]netip.Addr{}), n1.ns)
	must(t, h.SetLinkUp("eth0"))
	eventually(t, "routes after eth0 came back", check(n1, want(n1)), n1.ns)
	if err := reachable(t, pods[0], pods[1]); err != nil {
		t.Errorf("after eth0 came back: %v", err)
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
