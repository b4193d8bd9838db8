package e2e

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
)

// sbrTopology is the world around a two-interface pod:
//
//	bside (10.89.1.2) --- node (10.89.1.1; bridge sm0 10.88.71.1) --- pod eth0 (10.88.71.x, default route)
//	lanhost (10.58.9.2) --- router (10.58.9.1; 10.57.1.1 on the LAN) --- lan9 (node's NIC) >> pod net1 (macvlan, 10.57.1.x)
//
// The LAN host is off net1's subnet and reaches it through the LAN router,
// so the pod's answer to it needs a route via that router out of net1:
// without sbr the main table sends it out of eth0's default route, to a
// node that has no route to the LAN host's subnet.
type sbrTopology struct {
	bside, lanhost string
}

func newSBRTopology(t *testing.T) sbrTopology {
	t.Helper()
	host := hostHandle(t)
	router := nstest.NewNS(t, "lanrt")
	r := sbrOpen(t, router)
	if _, _, err := host.EnsureVeth(netops.VethOpts{HostName: "lan9", PeerName: "eth0", Peer: r}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.DeleteLink("lan9") })
	sbrMust(t, host.SetLinkUp("lan9"))
	sbrMust(t, r.EnsureAddr("eth0", netip.MustParsePrefix("10.57.1.1/24"), addrOpts()))
	sbrMust(t, r.SetLinkUp("eth0"))
	sbrMust(t, r.SetSysctl("net.ipv4.ip_forward", "1"))

	lanhost := nstest.NewNS(t, "lanhost")
	lh := sbrOpen(t, lanhost)
	if _, _, err := r.EnsureVeth(netops.VethOpts{HostName: "eth1", PeerName: "eth0", Peer: lh}); err != nil {
		t.Fatal(err)
	}
	sbrMust(t, r.EnsureAddr("eth1", netip.MustParsePrefix("10.58.9.1/24"), addrOpts()))
	sbrMust(t, r.SetLinkUp("eth1"))
	sbrMust(t, lh.EnsureAddr("eth0", netip.MustParsePrefix("10.58.9.2/24"), addrOpts()))
	sbrMust(t, lh.SetLinkUp("eth0"))
	sbrMust(t, lh.EnsureRoute(netops.Route{GW: netip.MustParseAddr("10.58.9.1"), Dev: "eth0"}))

	bside := nstest.NewNS(t, "bside")
	b := sbrOpen(t, bside)
	if _, _, err := host.EnsureVeth(netops.VethOpts{HostName: "bside9", PeerName: "eth0", Peer: b}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.DeleteLink("bside9") })
	sbrMust(t, host.EnsureAddr("bside9", netip.MustParsePrefix("10.89.1.1/24"), addrOpts()))
	sbrMust(t, host.SetLinkUp("bside9"))
	sbrMust(t, b.EnsureAddr("eth0", netip.MustParsePrefix("10.89.1.2/24"), addrOpts()))
	sbrMust(t, b.SetLinkUp("eth0"))
	sbrMust(t, b.EnsureRoute(netops.Route{GW: netip.MustParseAddr("10.89.1.1"), Dev: "eth0"}))
	return sbrTopology{bside: bside, lanhost: lanhost}
}

func sbrOpen(t *testing.T, ns string) *netops.Handle {
	t.Helper()
	h, err := netops.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func sbrMust(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// sbrMultiList is Multus' shape: eth0 on a bridge with the default route,
// net1 a macvlan on lan9 with the LAN router as gateway, with sbr chained
// after it when withSBR.
func sbrMultiList(t *testing.T, withSBR bool) string {
	sbr := ""
	if withSBR {
		sbr = `,{"type":"sbr"}`
	}
	return fmt.Sprintf(`{"cniVersion":"1.1.0","name":"sbr-multi","plugins":[{"type":"multi","delegates":[
		{"name":"sm-pods","cniVersion":"1.1.0","plugins":[{"type":"bridge","bridge":"sm0","isGateway":true,"isDefaultGateway":true,
			"ipam":{"type":"host-local","ranges":[[{"subnet":"10.88.71.0/24"}]]}}]},
		{"name":"sm-lan","cniVersion":"1.1.0","ifname":"net1","plugins":[{"type":"macvlan","master":"lan9",
			"ipam":{"type":"host-local","ranges":[[{"subnet":"10.57.1.0/24","rangeStart":"10.57.1.10","gateway":"10.57.1.1"}]]}}%s]}]}]}`, sbr)
}

// TestSBRBehindMulti: a pod with eth0 on a bridge (default route) and net1
// a macvlan on the node's NIC, through multi. A host behind the bridge side
// gets answers on eth0 either way. A host on the LAN but off net1's subnet
// (behind the LAN router) gets answers on net1 only with sbr chained in the
// macvlan network: without it the pod's replies leave by eth0's default
// route, to a node that cannot route them. DEL (twice) removes both
// interfaces and sbr's rule.
func TestSBRBehindMulti(t *testing.T) {
	e := newEnv(t)
	topo := newSBRTopology(t)
	t.Cleanup(func() { hostHandle(t).DeleteLink("sm0") })
	for _, withSBR := range []bool{false, true} {
		t.Run(fmt.Sprintf("sbr=%v", withSBR), func(t *testing.T) {
			e := e.withT(t)
			l := listFromJSON(t, sbrMultiList(t, withSBR))
			p := e.newPod("sbr")
			e.add(l, p)
			pod := sbrOpen(t, p.netns)
			eth0, net1 := sbrAddr4(t, pod, "eth0"), sbrAddr4(t, pod, "net1")

			bside, lanhost := sbrOpen(t, topo.bside), sbrOpen(t, topo.lanhost)
			if _, err := bside.Ping(eth0, 3*time.Second); err != nil {
				t.Errorf("the host behind the bridge side gets no answer from the pod's eth0 %s: %v", eth0, err)
			}
			_, err := lanhost.Ping(net1, 3*time.Second)
			switch {
			case withSBR && err != nil:
				t.Errorf("with sbr, the LAN host gets no answer from the pod's net1 %s: %v", net1, err)
			case !withSBR && err == nil:
				t.Errorf("without sbr, the LAN host got an answer from net1 %s: the test does not show what sbr changes", net1)
			}
			if withSBR {
				if err := nstest.Reachable(t, topo.lanhost, p.netns, net1); err != nil {
					t.Errorf("with sbr, TCP from the LAN host to net1 %s: %v", net1, err)
				}
				if err := nstest.Reachable(t, topo.bside, p.netns, eth0); err != nil {
					t.Errorf("with sbr, TCP from the bridge side to eth0 %s: %v", eth0, err)
				}
				if !sbrHasRule(t, pod, net1) {
					t.Errorf("no rule from %s in the pod", net1)
				}
			}
			e.del(l, p)
			e.del(l, p)
			if links := podLinks(t, p.netns); slices.Contains(links, "eth0") || slices.Contains(links, "net1") {
				t.Errorf("pod links after DEL: %v", links)
			}
			if sbrHasRule(t, pod, net1) {
				t.Errorf("the rule from %s is still in the pod after DEL", net1)
			}
		})
	}
}

// sbrAddr4 is the first IPv4 address of dev in the pod.
func sbrAddr4(t *testing.T, pod *netops.Handle, dev string) netip.Addr {
	t.Helper()
	addrs, err := pod.Addrs(dev)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if a.Addr().Is4() {
			return a.Addr()
		}
	}
	t.Fatalf("%s has no IPv4 address: %v", dev, addrs)
	return netip.Addr{}
}

// sbrHasRule reports whether the pod has a rule from ip.
func sbrHasRule(t *testing.T, pod *netops.Handle, ip netip.Addr) bool {
	t.Helper()
	rules, err := pod.Rules()
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(rules, func(r netops.Rule) bool { return r.Src.Addr() == ip })
}
