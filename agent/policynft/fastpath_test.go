package policynft_test

import (
	"fmt"
	"net/netip"
	"os"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// addRoutedPod adds pod key ("ns/name") that the node reaches by a route,
// as a pod of another node arrives over the overlay: its own veth vr0 in
// the node (10.98.0.1/24, fd00:98::1/64), the pod 10.98.0.2, fd00:98::2.
// Its traffic to the bridge's pods is forwarded (routed), which the fast
// path can offload.
func addRoutedPod(t *testing.T, l *lab, key string) *labPod {
	h, path := openNS(t, "pr")
	_, _, err := l.node.EnsureVeth(netops.VethOpts{HostName: "vr0", PeerName: "eth0", Peer: h})
	must(t, err)
	must(t, l.node.EnsureAddr("vr0", netip.MustParsePrefix("10.98.0.1/24"), netops.AddrOpts{}))
	must(t, l.node.EnsureAddr("vr0", netip.MustParsePrefix("fd00:98::1/64"), netops.AddrOpts{NoDAD: true}))
	must(t, l.node.SetSysctls(netops.SysctlSetting{Key: "net.ipv4.ip_forward", Value: "1"},
		netops.SysctlSetting{Key: "net.ipv6.conf.all.forwarding", Value: "1"}))
	p := &labPod{path: path, ip: netip.MustParseAddr("10.98.0.2"), ip6: netip.MustParseAddr("fd00:98::2")}
	for j := range key {
		if key[j] == '/' {
			p.ns, p.name = key[:j], key[j+1:]
		}
	}
	must(t, h.EnsureAddr("eth0", netip.PrefixFrom(p.ip, 24), netops.AddrOpts{}))
	must(t, h.EnsureAddr("eth0", netip.PrefixFrom(p.ip6, 64), netops.AddrOpts{NoDAD: true}))
	must(t, h.EnsureRoute(netops.Route{GW: netip.MustParseAddr("10.98.0.1"), Dev: "eth0"}))
	must(t, h.EnsureRoute(netops.Route{GW: netip.MustParseAddr("fd00:98::1"), Dev: "eth0"}))
	serve(t, p, false)
	l.pods = append(l.pods, p)
	return p
}

// fastPathLab is a lab with pod x/a on the bridge, routed pod y/r, and
// the fast path on br0 and vr0 (the test skips on a kernel without
// flowtables), its links settled (nstest.WaitLinksUp).
func fastPathLab(t *testing.T) (l *lab, xa, yr *labPod) {
	l = newLab(t, "x/a")
	yr = addRoutedPod(t, l, "y/r")
	_, err := l.node.NFT().EnsureFastPath(nft.FastPathSpec{Devices: []string{"br0", "vr0"}})
	nstest.SkipIfKernelLacks(t, "nftables flowtables", err)
	must(t, err)
	nstest.WaitLinksUp(t, l.nodePath)
	return l, l.pod("x/a"), yr
}

// forwardSeen counts, in a table of the test's at priority 20 of the
// forward hook (after the fast path's chain), the packets of connections
// to port 82 that still take the slow path.
type forwardSeen struct {
	t *testing.T
	c *nftables.Conn
}

var seenTable = &nftables.Table{Name: "fp-seen", Family: nftables.TableFamilyINet}

func newForwardSeen(t *testing.T, l *lab) *forwardSeen {
	f, err := os.Open(l.nodePath)
	must(t, err)
	t.Cleanup(func() { f.Close() })
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	must(t, err)
	c.AddTable(seenTable)
	accept := nftables.ChainPolicyAccept
	ch := c.AddChain(&nftables.Chain{Name: "count", Table: seenTable, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityRef(20), Policy: &accept})
	// the packets of connections to port 82, both ways (ct original
	// proto-dst)
	c.AddObj(&nftables.CounterObj{Table: seenTable, Name: "c82"})
	c.AddRule(&nftables.Rule{Table: seenTable, Chain: ch, Exprs: []expr.Any{
		&expr.Ct{Key: expr.CtKeyPROTODST, Direction: 0, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0, 82}},
		&expr.Objref{Type: 1, Name: "c82"}}}) // NFT_OBJECT_COUNTER
	must(t, c.Flush())
	return &forwardSeen{t: t, c: c}
}

func (f *forwardSeen) packets() uint64 {
	objs, err := f.c.GetObjects(seenTable)
	must(f.t, err)
	for _, o := range objs {
		if c, ok := o.(*nftables.CounterObj); ok && c.Name == "c82" {
			return c.Packets
		}
	}
	f.t.Fatal("no counter")
	return 0
}

// TestPolicyFastPath: with the fast path on (netops/nft/fastpath.go), an
// allowed routed connection is offloaded (its packets stop reaching the
// forward hook), and every policy transaction still decides it at its
// next packet, as docs/policy.md promises: a policy changed to deny it
// cuts it, changed back it lets TCP's resend through, and a change of set
// elements only (the client's labels) cuts it again. On a kernel without
// flowtables the test skips (make test-kernel runs it).
func TestPolicyFastPath(t *testing.T) {
	t.Parallel()
	l, xa, yr := fastPathLab(t)
	n := newNode(t, l)
	client := map[string]string{"app": "client"}
	n.e.SetPod(yr.apiPod(client))
	fromClients := func(p int) *networkingv1.NetworkPolicy {
		return np("x", "from-clients", networkingv1.NetworkPolicySpec{PolicyTypes: ingress,
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "y"), PodSelector: sel("app", "client")}},
				Ports: []networkingv1.NetworkPolicyPort{port(tcp, p)},
			}}})
	}
	n.e.SetNetworkPolicy(fromClients(82))
	n.start()
	seen := newForwardSeen(t, l)
	c := dialEcho(t, yr, xa)
	offloaded := func(what string) {
		t.Helper()
		for i := range 2 * nft.DefaultFastPathAfter {
			if !c.echo(fmt.Sprint(i), allowWait) {
				t.Fatalf("%s: echo %d: the allowed connection does not carry data", what, i)
			}
		}
		if seen.packets() == 0 {
			t.Fatal("the slow path's counter saw no packet of the connection (its first ones take it): it counts nothing")
		}
		before := seen.packets()
		for i := range 20 {
			if !c.echo(fmt.Sprint(i), allowWait) {
				t.Fatalf("%s: echo %d: the offloaded connection does not carry data", what, i)
			}
		}
		if got := seen.packets() - before; got != 0 {
			t.Fatalf("%s: the forward hook saw %d packets of 40 of an allowed connection past the fast path's threshold: not offloaded", what, got)
		}
	}
	offloaded("allowed")
	n.do(func(e *policy.Engine) policymodel.Delta { return e.SetNetworkPolicy(fromClients(83)) })
	if c.echo("two", denyWait) {
		t.Error("the offloaded connection still carries data after its policy no longer allows its port")
	}
	n.do(func(e *policy.Engine) policymodel.Delta { return e.SetNetworkPolicy(fromClients(82)) })
	if !c.resent("two") {
		t.Fatal("after the port is allowed again, the resent data is not echoed")
	}
	offloaded("allowed again")
	n.do(func(e *policy.Engine) policymodel.Delta {
		return e.SetPod(yr.apiPod(map[string]string{"app": "other"}))
	})
	if c.echo("cut", denyWait) {
		t.Error("the offloaded connection still carries data after its client lost the label the policy allows")
	}
	n.do(func(e *policy.Engine) policymodel.Delta { return e.SetPod(yr.apiPod(client)) })
	if !c.resent("cut") {
		t.Error("after the label is back, the resent data is not echoed")
	}
}

// TestPolicyFastPathDeletedPod: a pod's DEL (nft.UnhookPod, what the CNI
// DEL runs, and its veth's removal) takes its connections out of the fast
// path (the kernel makes their routes stale: netops/nft/fastpath.go), so
// that a new pod that gets the deleted pod's address, pending until the
// agent places it, never receives the old connections' packets: the next
// packet of an offloaded connection to the deleted pod meets the pending
// set's drop (its counter counts it) instead of the flowtable.
func TestPolicyFastPathDeletedPod(t *testing.T) {
	t.Parallel()
	l, xa, yr := fastPathLab(t)
	n := newNode(t, l)
	n.e.SetNetworkPolicy(np("x", "from-y", networkingv1.NetworkPolicySpec{PolicyTypes: ingress,
		Ingress: []networkingv1.NetworkPolicyIngressRule{{
			From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "y")}},
		}}}))
	n.start()
	seen := newForwardSeen(t, l)
	c := dialEcho(t, yr, xa)
	for i := range 3 * nft.DefaultFastPathAfter {
		if !c.echo(fmt.Sprint(i), allowWait) {
			t.Fatalf("echo %d: the allowed connection does not carry data", i)
		}
	}
	before := seen.packets()
	if !c.echo("offloaded", allowWait) || seen.packets() != before {
		t.Fatal("the connection is not offloaded: the test would show nothing")
	}
	h, err := nft.Open(l.nodePath)
	must(t, err)
	defer h.Close()
	// x/a's DEL, then a new pod of x with its address, pending.
	must(t, h.UnhookPod(nft.PodUnhook{IPs: []netip.Addr{xa.ip, xa.ip6}}))
	must(t, l.node.DeleteLink("veth0"))
	nh, path := openNS(t, "pp")
	br, err := l.node.LinkByName("br0")
	must(t, err)
	_, _, err = l.node.EnsureVeth(netops.VethOpts{HostName: "vethnew", PeerName: "eth0", Peer: nh, MasterIndex: br.Index})
	must(t, err)
	must(t, nh.EnsureAddr("eth0", netip.PrefixFrom(xa.ip, 24), netops.AddrOpts{}))
	must(t, nh.EnsureRoute(netops.Route{GW: nodeAddr, Dev: "eth0"}))
	xnew := &labPod{ns: "x", name: "new", path: path, ip: xa.ip, ip6: xa.ip6}
	serve(t, xnew, false)
	if marked, err := h.MarkPolicyPending("x", []netip.Addr{xa.ip}); err != nil || !marked {
		t.Fatalf("MarkPolicyPending(x) = %v, %v; want marked", marked, err)
	}
	pending := func() uint64 {
		cs, err := h.PolicyCounters()
		must(t, err)
		return cs["c-pending"].Packets
	}
	p0 := pending()
	if c.echo("old", denyWait) {
		t.Error("the old connection carries data to the new pod at its address")
	}
	if got := pending() - p0; got == 0 {
		t.Error("the pending set's drop counted none of the old connection's packets: they went round it (the fast path)")
	}
}
