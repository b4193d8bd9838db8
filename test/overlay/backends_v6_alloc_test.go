package overlay

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cnibox/cnibox/agent/lease"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/store"
)

// host-gw over IPv6 and the alloc backend: the two backends of issue 27
// that TestHostGWCluster and TestFlanneldEtcd leave out (host-gw there is
// IPv4 only; alloc has no data path, so compat's pings do not apply).

// gwRoutes returns the node's routes on dev into network that have a
// gateway, as destination -> gateway (either family: network's).
func gwRoutes(t *testing.T, ns, dev string, network netip.Prefix) map[netip.Prefix]netip.Addr {
	t.Helper()
	out := map[netip.Prefix]netip.Addr{}
	for _, r := range nodeRoutes(t, ns, dev) {
		if r.GW.IsValid() && r.Dst.Addr().Is4() == network.Addr().Is4() && network.Contains(r.Dst.Addr()) {
			out[r.Dst] = r.GW
		}
	}
	return out
}

// etcdKV is one lease as etcd holds it: its value's fields as written, and
// whether the key is bound to an etcd lease (a TTL, as flanneld's keys are).
type etcdKV struct {
	fields map[string]json.RawMessage
	ttl    bool
}

// rawLeases returns the keys under the prefix's subnets/ (the part after
// it: "10.244.1.0-24", "10.244.1.0-24&fd00:10:244:1::-64") with their
// values undecoded.
func rawLeases(t *testing.T, c *cluster) map[string]etcdKV {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.etcd.Get(ctx, etcdPrefix+"/subnets/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]etcdKV{}
	for _, kv := range resp.Kvs {
		v := etcdKV{ttl: kv.Lease != 0}
		if err := json.Unmarshal(kv.Value, &v.fields); err != nil {
			t.Fatalf("lease %s: %v: %s", kv.Key, err, kv.Value)
		}
		out[strings.TrimPrefix(string(kv.Key), etcdPrefix+"/subnets/")] = v
	}
	return out
}

// delLease deletes the lease of sn4 and sn6 (a dual-stack key) from etcd.
func delLease(t *testing.T, c *cluster, sn4, sn6 netip.Prefix) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	key := etcdPrefix + "/subnets/" + lease.SubnetKey(sn4, sn6)
	resp, err := c.etcd.Delete(ctx, key)
	if err != nil || resp.Deleted != 1 {
		t.Fatalf("delete lease %s: %v (deleted %v)", key, err, resp)
	}
}

// TestHostGWDualStack runs three cnibox nodes on host-gw with EnableIPv6
// over an underlay with IPv4 and IPv6 (fd77::/64) addresses: each node has,
// on eth0, a route per peer and family, "<peer subnet> via <peer public
// IP>" and "<peer IPv6 subnet> via <peer public IPv6>", and no other route
// into either cluster network; a peer whose public IPv6 is off the L2
// network gets its IPv4 route only; pods (node1's and node2's through the
// flannel role, node3's through the vxlan role) reach each other over IPv4
// and IPv6; node3 leaving takes both its routes off the others.
func TestHostGWDualStack(t *testing.T) {
	if nstest.InTestKernel() {
		t.Skip("runs on the host (make test)")
	}
	c := newCluster(t, 3)
	ip6 := map[*node]netip.Addr{}
	for i, n := range c.nodes {
		ip6[n] = netip.MustParseAddr(fmt.Sprintf("fd77::%d", 11+i))
		must(t, openH(t, n.ns).EnsureAddr("eth0", netip.PrefixFrom(ip6[n], 64), netops.AddrOpts{NoDAD: true}))
	}
	c.startEtcd()
	c.flannelConf()
	c.thirdOnVXLANRole()
	net4, net6 := netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/56")
	c.put(etcdPrefix+"/config", `{"EnableIPv6": true, "Network": "10.244.0.0/16", "IPv6Network": "fd00:10:244::/56", "Backend": {"Type": "host-gw"}}`)
	// A node whose IPv4 address is on the L2 network and whose IPv6 one is
	// not: its IPv4 subnet is routed, its IPv6 subnet is not.
	off4, off6 := netip.MustParsePrefix("10.244.200.0/24"), netip.MustParsePrefix("fd00:10:244:c8::/64")
	offIP, offIP6 := netip.MustParseAddr("192.168.77.200"), netip.MustParseAddr("2001:db8:1::7")
	c.put(etcdPrefix+"/subnets/"+lease.SubnetKey(off4, off6), fmt.Sprintf(`{"PublicIP":%q,"PublicIPv6":%q,"BackendType":"host-gw"}`, offIP, offIP6))
	for i, n := range c.nodes {
		n.startAgent("--health-addr", fmt.Sprintf("127.0.0.1:%d", 9666+i))
	}
	c.waitReady("host-gw", c.nodes...)
	sn4, sn6 := map[*node]netip.Prefix{}, map[*node]netip.Prefix{}
	for _, n := range c.nodes {
		s, _ := n.stateOf("host-gw")
		if !net4.Contains(s.Lease.Subnet.Addr()) || !net6.Contains(s.Lease.Subnet6.Addr()) || s.Lease.Subnet6.Bits() != 64 {
			t.Fatalf("%s leased %s and %s; want a /24 of %s and a /64 of %s", n.name, s.Lease.Subnet, s.Lease.Subnet6, net4, net6)
		}
		sn4[n], sn6[n] = s.Lease.Subnet, s.Lease.Subnet6
	}

	// want returns self's routes into network per family: every running
	// peer's, and the off-link node's IPv4 one.
	want := func(self *node, v6 bool) map[netip.Prefix]netip.Addr {
		out := map[netip.Prefix]netip.Addr{}
		if !v6 {
			out[off4] = offIP
		}
		for _, n := range c.nodes {
			if n == self || !sn4[n].IsValid() {
				continue
			}
			if v6 {
				out[sn6[n]] = ip6[n]
			} else {
				out[sn4[n]] = n.ip
			}
		}
		return out
	}
	check := func(n *node) func() string {
		return func() string {
			var diffs []string
			for _, f := range []struct {
				v6      bool
				network netip.Prefix
			}{{false, net4}, {true, net6}} {
				have, w := gwRoutes(t, n.ns, "eth0", f.network), want(n, f.v6)
				if fmt.Sprint(have) != fmt.Sprint(w) {
					diffs = append(diffs, fmt.Sprintf("%s routes into %s on eth0 = %v; want %v", n.name, f.network, have, w))
				}
			}
			return strings.Join(diffs, "; ")
		}
	}
	for _, n := range c.nodes {
		eventually(t, "host-gw routes of both families", check(n), n.ns)
		env := readFile(t, n.subnetFile)
		wantEnv := fmt.Sprintf("FLANNEL_NETWORK=%s\nFLANNEL_SUBNET=%s\nFLANNEL_IPV6_NETWORK=%s\nFLANNEL_IPV6_SUBNET=%s\nFLANNEL_MTU=1500\nFLANNEL_IPMASQ=true\n",
			net4, netip.PrefixFrom(sn4[n].Addr().Next(), 24), net6, netip.PrefixFrom(sn6[n].Addr().Next(), 64))
		if env != wantEnv {
			t.Errorf("%s subnet file:\n%s\nwant:\n%s", n.name, env, wantEnv)
		}
	}
	// Each node's lease is flannel's dual-stack key, with its public IPv6
	// beside its public IP and host-gw's type.
	leases := rawLeases(t, c)
	for _, n := range c.nodes {
		key := lease.SubnetKey(sn4[n], sn6[n])
		l, ok := leases[key]
		if !ok {
			t.Errorf("%s: no lease %s in etcd; have %v", n.name, key, leases)
			continue
		}
		if got := fmt.Sprintf("%s %s %s", l.fields["PublicIP"], l.fields["PublicIPv6"], l.fields["BackendType"]); got != fmt.Sprintf(`"%s" "%s" "host-gw"`, n.ip, ip6[n]) {
			t.Errorf("%s: lease %s has PublicIP, PublicIPv6, BackendType %s; want %s, %s, host-gw", n.name, key, got, n.ip, ip6[n])
		}
	}
	offLinkReported(t, c.nodes[0], offIP6.String())

	pods := podsReachEachOther(t, c.nodes...)
	reach6 := func(from, to *pod) error {
		if !sn6[to.node].Contains(to.ip6) {
			return fmt.Errorf("%s has IPv6 %v, not in its node's %s", to.id, to.ip6, sn6[to.node])
		}
		v6 := *to
		v6.ip = to.ip6
		return reachable(t, from, &v6)
	}
	for _, from := range pods {
		for _, to := range pods {
			if from.node != to.node {
				if err := reach6(from, to); err != nil {
					t.Errorf("over IPv6: %v\n%s", err, netDump(from.node.ns, to.node.ns))
				}
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// node3 leaves: its agent stops, its lease goes; node1 and node2 drop
	// both its routes, and still reach each other over IPv6.
	n3 := c.nodes[2]
	n3.stopAgent()
	delLease(t, c, sn4[n3], sn6[n3])
	delete(sn4, n3)
	delete(sn6, n3)
	for _, n := range c.nodes[:2] {
		eventually(t, "routes after node3 left", check(n), n.ns)
	}
	if err := reach6(pods[0], pods[1]); err != nil {
		t.Errorf("after node3 left: %v", err)
	}
}

// allocConf is the alloc cluster's net-conf: room for three subnets,
// 10.244.1.0/24 to 10.244.3.0/24, so that a node that took another's subnet
// would leave a third one without any.
const allocConf = `{"Network": "10.244.0.0/16", "SubnetMin": "10.244.1.0", "SubnetMax": "10.244.3.0", "Backend": {"Type": "alloc"}}`

// nodeNet is what a node's kernel has that a backend could add: its links
// and its IPv4 routes.
type nodeNet struct{ links, routes []string }

func netOf(t *testing.T, n *node) nodeNet {
	t.Helper()
	h := openH(t, n.ns)
	var out nodeNet
	links, err := h.Links()
	must(t, err)
	for _, l := range links {
		out.links = append(out.links, l.Name+"/"+l.Kind)
	}
	routes, err := h.Routes("")
	must(t, err)
	for _, r := range routes {
		if r.Dst.Addr().Is4() || (!r.Dst.IsValid() && r.GW.Is4()) {
			out.routes = append(out.routes, r.String())
		}
	}
	sort.Strings(out.links)
	sort.Strings(out.routes)
	return out
}

// synced waits until the node's running agent (this run's, not a record
// an earlier run left in the store) is ready under key and has synced the
// kernel with the leases it found, and returns its state.
func (n *node) synced(key string) store.OverlayState {
	t := n.c.t
	t.Helper()
	var s store.OverlayState
	eventually(t, n.name+"'s agent synced", func() string {
		var ok bool
		s, ok = n.stateOf(key)
		if !ok || s.AgentPID != n.agent.Process.Pid || !s.Ready || s.LastSync.IsZero() {
			return fmt.Sprintf("store under %q: %+v (found %v); want pid %d ready and synced; log:\n%s", key, s, ok, n.agent.Process.Pid, n.log())
		}
		return ""
	})
	return s
}

// checkAlloc checks that the alloc lease of a node (at public IP ip) is in
// etcd as flanneld's alloc backend writes it: the public IP, no type, no
// backend data, a TTL; and returns its subnet.
func checkAlloc(t *testing.T, leases map[string]etcdKV, ip netip.Addr) netip.Prefix {
	t.Helper()
	for key, l := range leases {
		if string(l.fields["PublicIP"]) != `"`+ip.String()+`"` {
			continue
		}
		sn, sn6, ok := lease.ParseSubnetKey(key)
		if !ok || sn6.IsValid() {
			t.Fatalf("the lease of %s has the key %q; want an IPv4 subnet's", ip, key)
		}
		for f, v := range l.fields {
			if f != "PublicIP" && !(f == "PublicIPv6" && string(v) == "null") {
				t.Errorf("the alloc lease %s of %s has %s=%s; flanneld's alloc publishes the public IP only", key, ip, f, v)
			}
		}
		if !l.ttl {
			t.Errorf("the lease %s of %s has no TTL; flanneld's leases have one", key, ip)
		}
		return sn
	}
	t.Fatalf("no lease of %s in etcd: %v", ip, leases)
	return netip.Prefix{}
}

// allocSubnet reports whether sn is one of allocConf's subnets.
func allocSubnet(sn netip.Prefix) bool {
	return sn.Bits() == 24 && netip.MustParsePrefix("10.244.0.0/22").Contains(sn.Addr()) && sn.Addr() != netip.MustParseAddr("10.244.0.0")
}

// TestAllocNode runs two cnibox nodes on alloc, one after the other: each
// leases its own /24 (in etcd under the prefix as flanneld's alloc leases
// are, its store ready under "alloc"), writes subnet.env as flanneld does
// (the interface's MTU), and programs no device and no route, neither for
// the other node's lease (node2's first sync had node1's) nor for its own
// subnet; a restart finds the lease again.
func TestAllocNode(t *testing.T) {
	if nstest.InTestKernel() {
		t.Skip("runs on the host (make test)")
	}
	c := newCluster(t, 2)
	c.startEtcd()
	c.put(etcdPrefix+"/config", allocConf)
	subnets, before := map[*node]netip.Prefix{}, map[*node]nodeNet{}
	for _, n := range c.nodes {
		before[n] = netOf(t, n)
		n.startAgent()
		s := n.synced("alloc")
		subnets[n] = s.Lease.Subnet
		if s.Lease.Type != "alloc" || s.Lease.MTU != 1500 || len(s.Peers) != 0 {
			t.Errorf("%s: store %+v; want type alloc, MTU 1500 (eth0's), no peer", n.name, s)
		}
	}
	leases := rawLeases(t, c)
	if len(leases) != 2 {
		t.Fatalf("etcd holds %d leases; want 2: %v", len(leases), leases)
	}
	for _, n := range c.nodes {
		sn := checkAlloc(t, leases, n.ip)
		if sn != subnets[n] || !allocSubnet(sn) {
			t.Errorf("%s: lease %s in etcd, %s in its store; want one of 10.244.{1,2,3}.0/24", n.name, sn, subnets[n])
		}
		env := readFile(t, n.subnetFile)
		if w := "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=" + netip.PrefixFrom(sn.Addr().Next(), 24).String() + "\nFLANNEL_MTU=1500\nFLANNEL_IPMASQ=true\n"; env != w {
			t.Errorf("%s subnet file:\n%s\nwant:\n%s", n.name, env, w)
		}
		if after := netOf(t, n); fmt.Sprint(after) != fmt.Sprint(before[n]) {
			t.Errorf("%s: the alloc agent changed the kernel:\nbefore %v\nafter  %v", n.name, before[n], after)
		}
	}
	if subnets[c.nodes[0]] == subnets[c.nodes[1]] {
		t.Fatalf("both nodes leased %s", subnets[c.nodes[0]])
	}
	var st struct {
		Type    string            `json:"type"`
		Ready   bool              `json:"ready"`
		Peers   int               `json:"peers"`
		Devices []json.RawMessage `json:"devices"`
	}
	c.nodes[1].cli(&st, "overlay", "status")
	if st.Type != "alloc" || !st.Ready || st.Peers != 0 || len(st.Devices) != 0 {
		t.Errorf("cnibox overlay status on node2 = %+v; want type alloc, ready, no peer, no device", st)
	}

	// A restart finds the node's lease (not from the subnet file: from etcd).
	n1 := c.nodes[0]
	n1.stopAgent()
	must(t, os.Remove(n1.subnetFile))
	n1.startAgent()
	if again := n1.synced("alloc").Lease.Subnet; again != subnets[n1] {
		t.Errorf("after a restart node1 leased %s; had %s", again, subnets[n1])
	}
	if l := rawLeases(t, c); len(l) != 2 {
		t.Errorf("after a restart etcd holds %d leases; want 2: %v", len(l), l)
	}
}

// TestFlanneldAlloc runs alloc nodes side by side on one etcd with room for
// three subnets: node1 with cnibox-agent, then node2 with flanneld v0.28.9,
// then node3 with cnibox-agent. Each takes a distinct lease (flanneld
// passing over cnibox's, node3 over both), all in flanneld's shape; the
// subnet files differ only in the subnet; no node programs a device or a
// route (node3's first sync had both other leases). Then node2 moves from
// flanneld to cnibox-agent and keeps flanneld's lease (in a full network:
// it must find it by its public IP).
func TestFlanneldAlloc(t *testing.T) {
	if nstest.InTestKernel() {
		t.Skip("runs on the host (make test)")
	}
	bin := flanneldPath(t)
	c := newCluster(t, 3)
	c.startEtcd()
	c.put(etcdPrefix+"/config", allocConf)
	n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]
	before := map[*node]nodeNet{}
	for _, n := range c.nodes {
		before[n] = netOf(t, n)
	}
	n1.startAgent()
	n1.synced("alloc")
	n2.startFlanneld(t, bin, "--etcd-endpoints=http://"+etcdAddr+":2379", "--etcd-prefix="+etcdPrefix)
	n2.waitSubnetFile(t)
	n3.startAgent()
	if s := n3.synced("alloc"); len(s.Peers) != 0 {
		t.Errorf("node3's store lists peers %v; alloc programs none", s.Peers)
	}

	leases := rawLeases(t, c)
	if len(leases) != 3 {
		t.Fatalf("etcd holds %d leases; want 3 (cnibox's, flanneld's, cnibox's): %v\n%s", len(leases), leases, n2.log())
	}
	subnets := map[*node]netip.Prefix{}
	seen := map[netip.Prefix]*node{}
	for _, n := range c.nodes {
		sn := checkAlloc(t, leases, n.ip)
		if other := seen[sn]; other != nil || !allocSubnet(sn) {
			t.Fatalf("%s leased %s (%v had it); want a subnet of its own of 10.244.{1,2,3}.0/24", n.name, sn, other)
		}
		seen[sn], subnets[n] = n, sn
		if got := flanneldSubnet(t, n); got != sn {
			t.Errorf("%s's subnet file says %s; its lease in etcd is %s", n.name, got, sn)
		}
	}
	for _, n := range []*node{n1, n3} {
		if s, _ := n.stateOf("alloc"); s.Lease.Subnet != subnets[n] {
			t.Errorf("%s's store has %s; its lease in etcd is %s", n.name, s.Lease.Subnet, subnets[n])
		}
	}
	// The subnet files differ only in the subnet.
	first := func(n *node) string { return netip.PrefixFrom(subnets[n].Addr().Next(), 24).String() }
	env2 := readFile(t, n2.subnetFile)
	for _, n := range []*node{n1, n3} {
		if env := readFile(t, n.subnetFile); strings.Replace(env, first(n), first(n2), 1) != env2 {
			t.Errorf("%s's subnet file (cnibox's):\n%s\nnode2's (flanneld's):\n%s\nwant the same but for the subnet", n.name, env, env2)
		}
	}
	// No node programs anything: each one's links and IPv4 routes are as
	// they were before its agent started.
	for _, n := range c.nodes {
		if after := netOf(t, n); fmt.Sprint(after) != fmt.Sprint(before[n]) {
			t.Errorf("%s: the alloc agent changed the kernel:\nbefore %v\nafter  %v\nlog:\n%s", n.name, before[n], after, n.log())
		}
	}

	// node2 moves from flanneld to cnibox-agent: it finds flanneld's lease
	// by its public IP (the subnet file gone, the network full).
	flannelStops[n2]()
	must(t, os.Remove(n2.subnetFile))
	n2.startAgent()
	if got := n2.synced("alloc").Lease.Subnet; got != subnets[n2] {
		t.Errorf("cnibox-agent on flanneld's node leased %s; flanneld had %s\n%s", got, subnets[n2], n2.log())
	}
	if got := flanneldSubnet(t, n2); got != subnets[n2] {
		t.Errorf("node2's subnet file after the move says %s; want %s", got, subnets[n2])
	}
	if l := rawLeases(t, c); len(l) != 3 {
		t.Errorf("after the move etcd holds %d leases; want 3: %v", len(l), l)
	}
	if after := netOf(t, n2); fmt.Sprint(after) != fmt.Sprint(before[n2]) {
		t.Errorf("node2 after the move: the kernel changed:\nbefore %v\nafter  %v", before[n2], after)
	}
}
