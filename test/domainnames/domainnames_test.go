//go:build !nokube

// Package domainnames tests ClusterNetworkPolicy's domainNames peer end to
// end on one node: the policy engine, its table (agent/policynft), the DNS
// proxy (agent/fqdn) with the DNS table and its routing, a real dnsmasq
// behind a kube-proxy-like ClusterIP, and pods on a bridge, as root. The
// test process's own (private) namespace is the node: the proxy opens its
// upstream sockets from any thread, as the agent does.
package domainnames

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/cnibox/cnibox/agent/fqdn"
	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/agent/policynft"
	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

func TestMain(m *testing.M) { nstest.MainInPrivateNetns(m) }

var (
	gw4, gw6   = netip.MustParseAddr("10.54.1.1"), netip.MustParseAddr("fd00:54:1::1")
	srvGW      = netip.MustParseAddr("10.54.2.1")
	dnsmasq    = netip.MustParseAddr("10.54.2.2")
	clusterIP  = netip.MustParseAddr("10.96.0.10")
	proxyPort  = uint16(1054)
	lookups    = 20
	webAddr4   = func(i int) netip.Addr { return netip.AddrFrom4([4]byte{192, 0, 2, byte(100 + i)}) }
	webAddr6   = func(i int) netip.Addr { return netip.MustParseAddr(fmt.Sprintf("2001:db8::%d", 100+i)) }
	otherAddr4 = netip.MustParseAddr("192.0.2.200")
	// a DNS server the pod may reach but the operator does not trust,
	// and the address it gives a name the policy names
	rogue, rogueAddr4 = netip.MustParseAddr("10.54.2.3"), netip.MustParseAddr("192.0.2.201")
)

// A probe waits as long as its expected outcome allows.
const (
	denyWait  = 1500 * time.Millisecond
	allowWait = 15 * time.Second
)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// dnsmasqConf: w1..w20.example.test (A and AAAA, TTL 30 s, each an
// address of its own), alias.example.test a CNAME to w1, and
// other.test, which no policy names.
func dnsmasqConf() string {
	var b strings.Builder
	// user= and group= (empty): run as the test's user, no switch to
	// nobody, whom make test-kernel's VM has no entry for.
	fmt.Fprintf(&b, "no-resolv\nno-hosts\nuser=\ngroup=\nport=53\nlisten-address=%s\nbind-interfaces\npid-file=\nlog-facility=-\n", dnsmasq)
	for i := 1; i <= lookups; i++ {
		fmt.Fprintf(&b, "host-record=w%d.example.test,%s,%s,30\n", i, webAddr4(i), webAddr6(i))
	}
	fmt.Fprintf(&b, "cname=alias.example.test,w1.example.test,30\nhost-record=other.test,%s,30\n", otherAddr4)
	return b.String()
}

// TestDomainNames: pod x/a, which an Admin ClusterNetworkPolicy lets reach
// *.example.test on TCP 80 (and the DNS server, by its endpoint's address,
// on 53) and denies everything else, resolves twenty names through the
// ClusterIP and connects to each address the moment it has the answer:
// IPv4 and IPv6, over UDP and TCP DNS, none of those first connections is
// dropped (the deny rule's counter counts none of their packets). An address it never resolved, a name no policy names, and
// the same address from a pod that did not resolve it stay denied; a pod
// no such policy selects keeps its DNS as it is (not sent to the proxy).
func TestDomainNames(t *testing.T) {
	nstest.RequireRoot(t)
	dnsmasqBin := nstest.RequireProgram(t, "dnsmasq", "dnsmasq-base")
	if !nstest.InPrivateNetns() {
		t.Fatal("needs TestMain's private namespace: it is the node")
	}
	node, err := netops.Open("")
	must(t, err)
	defer node.Close()
	must(t, node.SetSysctls(netops.SysctlSetting{Key: "net.bridge.bridge-nf-call-iptables", Value: "1"},
		netops.SysctlSetting{Key: "net.bridge.bridge-nf-call-ip6tables", Value: "1"},
		netops.SysctlSetting{Key: "net.ipv4.ip_forward", Value: "1"},
		netops.SysctlSetting{Key: "net.ipv6.conf.all.forwarding", Value: "1"}))
	br, err := node.EnsureBridge(netops.BridgeOpts{Name: "br0"})
	must(t, err)
	must(t, node.EnsureAddr("br0", netip.PrefixFrom(gw4, 24), netops.AddrOpts{}))
	must(t, node.EnsureAddr("br0", netip.PrefixFrom(gw6, 64), netops.AddrOpts{NoDAD: true}))
	type pod struct {
		ns, path string
		ip4, ip6 netip.Addr
	}
	var pods []pod
	for i, ns := range []string{"x", "y"} {
		path := nstest.NewNS(t, "dn")
		h, err := netops.Open(path)
		must(t, err)
		defer h.Close()
		_, _, err = node.EnsureVeth(netops.VethOpts{HostName: fmt.Sprintf("veth%d", i), PeerName: "eth0", Peer: h, MasterIndex: br.Index})
		must(t, err)
		p := pod{ns: ns, path: path, ip4: netip.AddrFrom4([4]byte{10, 54, 1, byte(i + 2)}), ip6: netip.AddrFrom16([16]byte{0xfd, 0, 0, 0x54, 0, 1, 15: byte(i + 2)})}
		must(t, h.EnsureAddr("eth0", netip.PrefixFrom(p.ip4, 24), netops.AddrOpts{}))
		must(t, h.EnsureAddr("eth0", netip.PrefixFrom(p.ip6, 64), netops.AddrOpts{NoDAD: true}))
		must(t, h.EnsureRoute(netops.Route{GW: gw4, Dev: "eth0"}))
		must(t, h.EnsureRoute(netops.Route{GW: gw6, Dev: "eth0"}))
		pods = append(pods, p)
	}
	xa, ya := pods[0], pods[1]

	// The outside: dnsmasq and the web servers (every test address,
	// TCP 80) in one namespace behind the node's vsrv.
	srvPath := nstest.NewNS(t, "dns")
	srv, err := netops.Open(srvPath)
	must(t, err)
	defer srv.Close()
	_, _, err = node.EnsureVeth(netops.VethOpts{HostName: "vsrv", PeerName: "eth0", Peer: srv})
	must(t, err)
	must(t, node.EnsureAddr("vsrv", netip.PrefixFrom(srvGW, 24), netops.AddrOpts{}))
	must(t, node.EnsureAddr("vsrv", netip.MustParsePrefix("fd00:54:2::1/64"), netops.AddrOpts{NoDAD: true}))
	must(t, srv.EnsureAddr("eth0", netip.PrefixFrom(dnsmasq, 24), netops.AddrOpts{}))
	must(t, srv.EnsureAddr("eth0", netip.PrefixFrom(rogue, 24), netops.AddrOpts{}))
	must(t, srv.EnsureAddr("lo", netip.PrefixFrom(rogueAddr4, 32), netops.AddrOpts{}))
	must(t, srv.EnsureAddr("eth0", netip.MustParsePrefix("fd00:54:2::2/64"), netops.AddrOpts{NoDAD: true}))
	must(t, srv.EnsureRoute(netops.Route{GW: srvGW, Dev: "eth0"}))
	must(t, srv.EnsureRoute(netops.Route{GW: netip.MustParseAddr("fd00:54:2::1"), Dev: "eth0"}))
	must(t, srv.EnsureAddr("lo", netip.PrefixFrom(otherAddr4, 32), netops.AddrOpts{}))
	must(t, node.EnsureRoute(netops.Route{Dst: netip.MustParsePrefix("192.0.2.0/24"), GW: dnsmasq, Dev: "vsrv"}))
	must(t, node.EnsureRoute(netops.Route{Dst: netip.MustParsePrefix("2001:db8::/64"), GW: netip.MustParseAddr("fd00:54:2::2"), Dev: "vsrv"}))
	for i := 1; i <= lookups; i++ {
		must(t, srv.EnsureAddr("lo", netip.PrefixFrom(webAddr4(i), 32), netops.AddrOpts{}))
		must(t, srv.EnsureAddr("lo", netip.PrefixFrom(webAddr6(i), 128), netops.AddrOpts{NoDAD: true}))
	}
	for _, network := range []string{"tcp4", "tcp6"} {
		var ln net.Listener
		must(t, nstest.Run(t, srvPath, func() (err error) { ln, err = net.Listen(network, ":80"); return err }))
		defer ln.Close()
		go nstest.Greet(ln)
	}
	conf := filepath.Join(t.TempDir(), "dnsmasq.conf")
	must(t, os.WriteFile(conf, []byte(dnsmasqConf()), 0o644))
	cmd := exec.Command("nsenter", "--net="+srvPath, dnsmasqBin, "--keep-in-foreground", "--conf-file="+conf)
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	must(t, cmd.Start())
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	// The rogue: a pod's own DNS server, which says db.example.test is
	// rogueAddr4.
	rogueConf := filepath.Join(t.TempDir(), "rogue.conf")
	must(t, os.WriteFile(rogueConf, []byte(fmt.Sprintf("no-resolv\nno-hosts\nuser=\ngroup=\nport=53\nlisten-address=%s\nbind-interfaces\npid-file=\nlog-facility=-\nhost-record=db.example.test,%s,30\n",
		rogue, rogueAddr4)), 0o644))
	rogueCmd := exec.Command("nsenter", "--net="+srvPath, dnsmasqBin, "--keep-in-foreground", "--conf-file="+rogueConf)
	rogueOut := &strings.Builder{} // its own: two commands' copies may not share a writer
	rogueCmd.Stdout, rogueCmd.Stderr = rogueOut, rogueOut
	must(t, rogueCmd.Start())
	defer func() { rogueCmd.Process.Kill(); rogueCmd.Wait() }()
	// kube-proxy's stand-in: the ClusterIP DNATed to dnsmasq at -100.
	nftCmd := exec.Command(nstest.RequireProgram(t, "nft", "nftables"), "-f", "-")
	nftCmd.Stdin = strings.NewReader(fmt.Sprintf(`table inet kp {
  chain prerouting { type nat hook prerouting priority -100; ip daddr %[1]s meta l4proto { tcp, udp } th dport 53 dnat ip to %[2]s:53; }
  chain output { type nat hook output priority -100; ip daddr %[1]s meta l4proto { tcp, udp } th dport 53 dnat ip to %[2]s:53; }
}`, clusterIP, dnsmasq))
	if b, err := nftCmd.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v\n%s", err, b)
	}
	must(t, node.EnsureRoute(netops.Route{Dst: netip.PrefixFrom(clusterIP, 32), GW: dnsmasq, Dev: "vsrv"}))

	// The agent: the engine, its table, the DNS side and the proxy.
	e := policy.NewEngine("n1")
	for _, ns := range []string{"x", "y"} {
		e.SetNamespace(&policy.Namespace{Name: ns, Labels: map[string]string{"ns": ns}})
	}
	for _, p := range pods {
		e.SetPod(&policy.Pod{Namespace: p.ns, Name: "a", Node: "n1", IPs: []netip.Addr{p.ip4, p.ip6}})
	}
	tcp := func(n int32) cnpv1.ClusterNetworkPolicyProtocol {
		return cnpv1.ClusterNetworkPolicyProtocol{TCP: &cnpv1.ClusterNetworkPolicyProtocolTCP{DestinationPort: &cnpv1.Port{Number: n}}}
	}
	c := &cnpv1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "example"}, Spec: cnpv1.ClusterNetworkPolicySpec{
		Tier: cnpv1.AdminTier, Priority: 1,
		Subject: cnpv1.ClusterNetworkPolicySubject{Namespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"ns": "x"}}},
		Egress: []cnpv1.ClusterNetworkPolicyEgressRule{
			{Action: cnpv1.ClusterNetworkPolicyRuleActionAccept, To: []cnpv1.ClusterNetworkPolicyEgressPeer{{Networks: []cnpv1.CIDR{cnpv1.CIDR(dnsmasq.String() + "/32"), cnpv1.CIDR(rogue.String() + "/32")}}},
				Protocols: []cnpv1.ClusterNetworkPolicyProtocol{{UDP: &cnpv1.ClusterNetworkPolicyProtocolUDP{DestinationPort: &cnpv1.Port{Number: 53}}}, tcp(53)}},
			{Action: cnpv1.ClusterNetworkPolicyRuleActionAccept, To: []cnpv1.ClusterNetworkPolicyEgressPeer{{DomainNames: []cnpv1.DomainName{"*.example.test"}}}, Protocols: []cnpv1.ClusterNetworkPolicyProtocol{tcp(80)}},
			{Action: cnpv1.ClusterNetworkPolicyRuleActionDeny, To: []cnpv1.ClusterNetworkPolicyEgressPeer{{Networks: []cnpv1.CIDR{"0.0.0.0/0", "::/0"}}}},
		},
	}}
	e.SetClusterNetworkPolicy(c)
	// the cluster DNS Service's ClusterIP and endpoint, as the watcher
	// sets them from the API
	e.SetResolvers([]netip.Addr{clusterIP, dnsmasq})
	sink, err := policynft.New("")
	must(t, err)
	defer sink.Close()
	defer sink.Remove()
	dns, err := policynft.NewDNS("")
	must(t, err)
	defer dns.Close()
	sink.WithDNS(dns)
	m := e.Model()
	d := policymodel.Delta{Rules: true}
	for id := range m.Sets {
		d.AddSets = append(d.AddSets, id)
	}
	must(t, sink.Apply(m, d))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go sink.Run(ctx, nil)
	cfg := fqdn.DefaultConfig
	cfg.Port4, cfg.Port6, cfg.Permit, cfg.Learn = proxyPort, proxyPort, dns.Permit, dns.Learn
	if testing.Verbose() {
		cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	proxy, err := fqdn.Listen(cfg)
	must(t, err)
	defer proxy.Close()
	must(t, node.EnsureMarkLocal(netops.DNSMarkLocal))
	defer node.DeleteMarkLocal(netops.DNSMarkLocal)
	_, err = node.NFT().EnsureDNSRedirect(nft.DNSRedirect{Port4: proxyPort, Port6: proxyPort})
	must(t, err)
	defer node.NFT().DeleteDNSRedirect()
	if got, err := node.NFT().DNSPods(); err != nil || len(got) != 2 || !slicesHave(got, xa.ip4, xa.ip6) {
		t.Fatalf("the DNS table's pods %v (%v): want x/a's two addresses", got, err)
	}

	resolver := func(p pod, server netip.Addr, network string) *net.Resolver {
		return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var c net.Conn
			err := nstest.Run(t, p.path, func() (err error) {
				var d net.Dialer
				c, err = d.DialContext(ctx, network, netip.AddrPortFrom(server, 53).String())
				return err
			})
			return c, err
		}}
	}
	// dial connects to a's TCP 80: one that the policy denies times out
	// (wait: 1.5 s), one it allows is answered (wait: generous, TCG and a
	// loaded machine are slow); whether a packet of it was dropped on
	// the way is the deny rule's counter's to say (dropped, below).
	dial := func(p pod, a netip.Addr, wait time.Duration) error {
		return nstest.Run(t, p.path, func() error {
			c, err := net.DialTimeout("tcp", netip.AddrPortFrom(a, 80).String(), wait)
			if err == nil {
				c.Close()
			}
			return err
		})
	}
	lookupAt := func(p pod, server netip.Addr, network, name string, family string) ([]netip.Addr, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return resolver(p, server, network).LookupNetIP(ctx, family, name)
	}
	lookup := func(p pod, network, name string, family string) ([]netip.Addr, error) {
		return lookupAt(p, clusterIP, network, name, family)
	}
	// The links are new: y/a, which nothing denies, reaches the outside
	// over both families first (neighbours resolved), so that a drop
	// below is the policy's.
	for _, a := range []netip.Addr{webAddr4(lookups), webAddr6(lookups)} {
		deadline := time.Now().Add(20 * time.Second)
		for dial(ya, a, time.Second) != nil {
			if time.Now().After(deadline) {
				t.Fatalf("y/a cannot reach %s", a)
			}
		}
	}
	// Before any lookup: denied.
	h, err := nft.Open("")
	must(t, err)
	defer h.Close()
	// dropped is what the policy's deny rule has dropped so far.
	deny := "c-" + policymodel.ShortID("cnp/example/egress/2")
	dropped := func() uint64 {
		cs, err := h.PolicyCounters()
		must(t, err)
		return cs[deny].Packets
	}
	if dial(xa, webAddr4(1), denyWait) == nil {
		t.Fatal("x/a reaches w1's address before resolving it")
	}
	if dropped() == 0 {
		t.Fatalf("the deny rule's counter %s did not count the denied SYN", deny)
	}
	before := dropped()
	start := time.Now()
	for i := 1; i <= lookups; i++ {
		network, family := "udp", "ip4"
		if i%4 == 0 {
			network = "tcp"
		}
		if i%2 == 0 {
			family = "ip6"
		}
		name := fmt.Sprintf("w%d.example.test", i)
		addrs, err := lookup(xa, network, name, family)
		if err != nil || len(addrs) != 1 {
			t.Fatalf("x/a: %s lookup of %s over %s: %v, %v\n%s", family, name, network, addrs, err, out)
		}
		if err := dial(xa, addrs[0], allowWait); err != nil {
			t.Errorf("x/a: the first connection to %s (%s over %s): %v", addrs[0], name, network, err)
		}
	}
	if n := dropped() - before; n > 0 {
		t.Errorf("the deny rule dropped %d packets of the %d first connections after their lookups: want none", n, lookups)
	}
	t.Logf("%d lookups, each followed by its first connection, in %s", lookups, time.Since(start).Round(time.Millisecond))

	// What stays denied.
	if dial(xa, webAddr6(1), denyWait) == nil {
		t.Error("x/a reaches w1's IPv6 address, which it never asked for")
	}
	if addrs, err := lookup(xa, "udp", "other.test", "ip4"); err != nil || len(addrs) != 1 {
		t.Fatalf("other.test: %v, %v", addrs, err)
	} else if dial(xa, addrs[0], denyWait) == nil {
		t.Error("x/a reaches other.test's address: no policy names it")
	}
	if addrs, err := lookup(xa, "udp", "alias.example.test", "ip4"); err != nil || len(addrs) != 1 || addrs[0] != webAddr4(1) {
		t.Errorf("alias.example.test (a CNAME to w1): %v, %v", addrs, err)
	}
	// A server the policy lets x/a reach but the operator does not trust:
	// its answer reaches x/a as it is, past the proxy, and opens nothing
	// (issue 60, finding 4: it opened rogueAddr4 before).
	seenBefore := proxy.Stats().Queries
	for _, network := range []string{"udp", "tcp"} {
		if addrs, err := lookupAt(xa, rogue, network, "db.example.test", "ip4"); err != nil || len(addrs) != 1 || addrs[0] != rogueAddr4 {
			t.Fatalf("db.example.test from the untrusted server over %s: %v, %v; want %s\n%s", network, addrs, err, rogueAddr4, rogueOut)
		}
	}
	if got := proxy.Stats().Queries; got != seenBefore {
		t.Errorf("the proxy saw %d queries to the untrusted server: want none", got-seenBefore)
	}
	if dial(xa, rogueAddr4, denyWait) == nil {
		t.Error("x/a reaches the address an untrusted DNS server gave it for db.example.test")
	}
	// y/a: not the policy's subject, its DNS is its own (the proxy never
	// sees it) and nothing denies it.
	seen := proxy.Stats().Queries
	if addrs, err := lookup(ya, "udp", "w3.example.test", "ip4"); err != nil || len(addrs) != 1 {
		t.Errorf("y/a's lookup: %v, %v", addrs, err)
	}
	if got := proxy.Stats().Queries; got != seen {
		t.Errorf("the proxy saw %d of y/a's queries: its DNS is not the policy's", got-seen)
	}
	// x/a's pairs are x/a's: y/a, denied by nothing, proves nothing;
	// the pair set itself has x/a and not y/a.
	mem, err := h.PolicyMembership()
	must(t, err)
	set := e.Model().Domains[0].Set
	if ok, _ := mem.Has(set, policymodel.PairElem(xa.ip4, webAddr4(1))); !ok {
		t.Error("the kernel's pair set lacks x/a . w1")
	}
	if ok, _ := mem.Has(set, policymodel.PairElem(ya.ip4, webAddr4(3))); ok {
		t.Error("the kernel's pair set has y/a . w3: y/a is not the policy's")
	}
}

func slicesHave(got []netip.Addr, want ...netip.Addr) bool {
	for _, w := range want {
		found := false
		for _, g := range got {
			if g == w {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}
