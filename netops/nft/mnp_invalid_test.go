package nft_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// TestPodPolicyInvalidUntracked: on a net1 that a MultiNetworkPolicy
// isolates for ingress (TCP 5555 from the peer admitted), what conntrack
// calls INVALID (an unsolicited echo reply, TCP with no flags, FIN alone)
// never reaches the pod's stack and is counted on c-i0-invalid, IPv4 and
// IPv6; with the pod's traffic untracked (a NOTRACK rule in its
// namespace), the peer's connection to TCP 5555 is judged by its packets'
// own fields and passes, the one to 5556 does not (before, no rule could
// read an untracked packet and the isolation dropped both).
func TestPodPolicyInvalidUntracked(t *testing.T) {
	t.Parallel()
	peer, pod := openNS(t, "lo"), openNS(t, "lo")
	_, _, err := peer.EnsureVeth(netops.VethOpts{HostName: "net1", PeerName: "net1", Peer: pod})
	must(t, err)
	peerA := []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")}
	podA := []netip.Addr{netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("2001:db8::2")}
	for i, bits := range []int{24, 64} {
		opts := netops.AddrOpts{NoDAD: i == 1}
		must(t, peer.EnsureAddr("net1", netip.PrefixFrom(peerA[i], bits), opts))
		must(t, pod.EnsureAddr("net1", netip.PrefixFrom(podA[i], bits), opts))
		for _, p := range []uint16{5555, 5556} {
			listenTCP(t, pod.Path(), netip.AddrPortFrom(podA[i], p))
		}
		deadline := time.Now().Add(20 * time.Second) // neighbour discovery on a new link
		for dial(t, peer.Path(), netip.AddrPortFrom(podA[i], 5555)) != nil {
			if time.Now().After(deadline) {
				t.Fatalf("%s not reachable from the peer without a table", podA[i])
			}
		}
	}
	allowIn := &policymodel.Policy{ID: "mnp/t/in", Tier: policymodel.TierNetworkPolicy, Subject: "sself", Rules: []policymodel.Rule{{
		ID: "mnp/t/in/ingress/0", Action: policymodel.Allow, Clauses: []policymodel.Clause{{
			Peer: "speer", Ports: []policymodel.PortRange{{Proto: policymodel.TCP, First: 5555, Last: 5555}}}}}}}
	must(t, pod.NFT().ApplyPodPolicy(&nft.PodPolicy{Ifaces: []nft.PodIface{{Name: "net1",
		Ingress: nft.PodDir{Isolated: true, Policies: []*policymodel.Policy{allowIn}},
		Sets: []*policymodel.Set{policymodel.NewSet("speer", policymodel.Addrs, "the peer",
			policymodel.AddrElem(peerA[0]), policymodel.AddrElem(peerA[1]))}}}}))

	for i := range podA {
		v6 := i == 1
		icmp := nstest.ProtoICMP
		if v6 {
			icmp = nstest.ProtoICMPv6
		}
		tcp, echo := nstest.ListenRaw(t, pod.Path(), nstest.ProtoTCP, v6), nstest.ListenRaw(t, pod.Path(), icmp, v6)
		for _, p := range []nstest.RawPacket{
			nstest.ICMPEcho(peerA[i], podA[i], true, 7, 1, []byte("unasked")),
			nstest.TCPSegment(peerA[i], podA[i], 43001, 5555, 0, nil),
			nstest.TCPSegment(peerA[i], podA[i], 43002, 5555, nstest.TCPFin, nil),
		} {
			l := tcp
			if p.Proto == icmp {
				l = echo
			}
			if l.Gets(t, peer.Path(), p, time.Second) {
				t.Errorf("protocol %d from %s to %s, INVALID, reached the pod", p.Proto, p.Src, p.Dst)
			}
		}
	}
	if n, ok := podCounter(t, pod, "c-i0-invalid"); n == 0 {
		t.Errorf("c-i0-invalid counted nothing (the table has it: %v)", ok)
	}

	notrack(t, pod)
	for _, a := range podA {
		if err := dial(t, peer.Path(), netip.AddrPortFrom(a, 5555)); err != nil {
			t.Errorf("untracked: the peer cannot reach %s TCP 5555, which the policy admits: %v", a, err)
		}
		if err := dial(t, peer.Path(), netip.AddrPortFrom(a, 5556)); err == nil {
			t.Errorf("untracked: the peer reaches %s TCP 5556, which the policy does not admit", a)
		}
	}
}

// podCounter reads counter name of the pod's MultiTable, and whether the
// table has it.
func podCounter(t *testing.T, pod *netops.Handle, name string) (uint64, bool) {
	t.Helper()
	ns, err := openNSFile(pod.Path())
	must(t, err)
	defer ns.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns.Fd())))
	must(t, err)
	objs, err := c.GetObjects(&nftables.Table{Name: nft.MultiTable, Family: nftables.TableFamilyINet})
	must(t, err)
	for _, o := range objs {
		if ctr, ok := o.(*nftables.CounterObj); ok && ctr.Name == name {
			return ctr.Packets, true
		}
	}
	return 0, false
}

// notrack exempts every packet of the namespace from conntrack, in a table
// of the test's (prerouting and output, priority raw).
func notrack(t *testing.T, h *netops.Handle) {
	ns, err := openNSFile(h.Path())
	must(t, err)
	defer ns.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns.Fd())))
	must(t, err)
	tb := c.AddTable(&nftables.Table{Name: "test-notrack", Family: nftables.TableFamilyINet})
	accept := nftables.ChainPolicyAccept
	for _, hook := range []*nftables.ChainHook{nftables.ChainHookPrerouting, nftables.ChainHookOutput} {
		ch := c.AddChain(&nftables.Chain{Name: "c" + string(rune('0'+*hook)), Table: tb, Type: nftables.ChainTypeFilter,
			Hooknum: hook, Priority: nftables.ChainPriorityRaw, Policy: &accept})
		c.AddRule(&nftables.Rule{Table: tb, Chain: ch, Exprs: []expr.Any{&expr.Notrack{}}})
	}
	must(t, c.Flush())
}
