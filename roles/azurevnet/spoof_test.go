package azurevnet_test

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/azurevnet"
	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/roles/internal/roletest"
)

// dropWait is how long a test waits for what the check should keep away.
const dropWait = 1500 * time.Millisecond

// tconf is a transparent azure-vnet network, dual stack, with host-local
// addresses of the subnet of nicNode's NIC; extra adds fields.
func tconf(v, extra string) []byte {
	return []byte(fmt.Sprintf(`{"cniVersion":%q,"name":"aznet","type":"azure-vnet","mode":"transparent"%s,
		"ipam":{"type":"host-local","ranges":[[{"subnet":"10.240.0.0/16","rangeStart":"10.240.0.36","rangeEnd":"10.240.0.65"}],[{"subnet":"fd40::/64"}]]}}`, v, extra))
}

// nicNode gives the test's node the NIC of an AKS VM, as far as a pod's
// host end sees it: nic0 (a veth into a fabric namespace) with the node's
// address 10.240.0.4/16 and the default route, so the node routes the
// pods' gateway 169.254.1.1 out of it and the host end answers ARP for it
// by proxy.
func nicNode(t *testing.T, host *netops.Handle) {
	t.Helper()
	fabric := roletest.Open(t, nstest.NewNS(t, "fabric"))
	if _, _, err := host.EnsureVeth(netops.VethOpts{HostName: "nic0", PeerName: "eth0", Peer: fabric}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.DeleteLink("nic0") })
	for _, err := range []error{
		host.EnsureAddr("nic0", netip.MustParsePrefix("10.240.0.4/16"), netops.AddrOpts{}),
		host.SetLinkUp("nic0"),
		host.EnsureRoute(netops.Route{Dst: netip.MustParsePrefix("0.0.0.0/0"), Dev: "nic0"}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// podIPs are the pod's addresses in an ADD result, sorted.
func podIPs(t *testing.T, out []byte) []netip.Addr {
	t.Helper()
	var ips []netip.Addr
	for _, ipc := range roletest.Result(t, out, "1.0.0").IPs {
		a, _ := netip.AddrFromSlice(ipc.Address.IP)
		ips = append(ips, a.Unmap())
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	return ips
}

// hasNeigh reports whether the namespace at ns (the node: "") has, within
// wait, a neighbour entry for ip on dev. It opens the namespace afresh:
// a Handle remembers the index of a link it has seen, and dev may have
// been made again since.
func hasNeigh(t *testing.T, ns, dev string, ip netip.Addr, wait time.Duration) bool {
	t.Helper()
	h, err := netops.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for deadline := time.Now().Add(wait); ; {
		list, err := h.Neighs(dev)
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(list, func(n netops.Neigh) bool { return n.IP == ip && len(n.MAC) > 0 }) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestIPSpoofCheck: a transparent pod's ADD checks its host end
// (ipspoofchk is on by default): through the node it reaches another pod
// from its own addresses, IPv4 and IPv6, also after its neighbour entry
// for the virtual gateway 169.254.1.1 is gone (its ARP request for the
// gateway carries its own address and the host end's proxy ARP answers
// it); datagrams from a foreign address or from the gateway's are
// dropped, and an ARP request for the gateway that claims another pod's
// address teaches the node nothing. With "ipspoofchk": false all of that
// gets through. DEL (twice) removes the check; GC removes that of a host
// end gone without a DEL.
func TestIPSpoofCheck(t *testing.T) {
	n := roletest.NewNode(t, azurevnet.Role, hostlocal.Role)
	host := roletest.Open(t, "")
	nicNode(t, host)
	on, off := tconf("1.0.0", ""), tconf("1.0.0", `,"ipspoofchk":false`)
	victim, attacker := n.NewPod("victim"), n.NewPod("attacker")
	vips := podIPs(t, n.Must(azurevnet.Role, "ADD", victim, on))
	aips := podIPs(t, n.Must(azurevnet.Role, "ADD", attacker, on))
	port := azurevnet.HostVethName(attacker.ID, "eth0")
	// Its addresses, and with IPv6 its link-local address.
	want := append(slices.Clone(aips), nft.PodLinkLocal(port))
	if got, err := host.NFT().SourceCheckAddrs(nft.SrcCheckRouted, port); err != nil || !slices.Equal(got, want) {
		t.Errorf("the attacker's host end may send from %v (%v), want %v", got, err, want)
	}

	// The pod resolves its gateway again: its ARP has its own sender.
	gw := netip.MustParseAddr(azurevnet.VirtualGW4)
	if err := roletest.Open(t, attacker.Netns).DeleteNeigh("eth0", gw); err != nil {
		t.Fatal(err)
	}
	foreign := []netip.Addr{netip.MustParseAddr("10.240.0.99"), netip.MustParseAddr("fd40::99")}
	for i, vip := range vips {
		sink := nstest.ListenUDP(t, victim.Netns, vip)
		if !nstest.SendFrom(t, attacker.Netns, aips[i], sink, 10*time.Second) {
			t.Errorf("the attacker's datagram from its own %s did not arrive", aips[i])
		}
		forged := []netip.Addr{foreign[i]}
		if vip.Is4() {
			forged = append(forged, gw)
		}
		for _, src := range forged {
			if nstest.SendFrom(t, attacker.Netns, src, sink, dropWait) {
				t.Errorf("the attacker's datagram from %s got through its host end", src)
			}
		}
	}
	if !hasNeigh(t, attacker.Netns, "eth0", gw, 0) {
		t.Errorf("the attacker's pod did not resolve its gateway %s again", gw)
	}
	if err := nstest.SendARPRequest(t, attacker.Netns, "eth0", vips[0], gw); err != nil {
		t.Fatal(err)
	}
	if hasNeigh(t, "", port, vips[0], dropWait) {
		t.Errorf("the node learnt the victim's %s at the attacker's host end %s", vips[0], port)
	}

	n.Must(azurevnet.Role, "DEL", attacker, on)
	n.Must(azurevnet.Role, "DEL", attacker, on)
	if ports, err := host.NFT().SourceCheckPorts(nft.SrcCheckRouted); err != nil || slices.Contains(ports, port) {
		t.Errorf("checked ports after the DELs: %v (%v)", ports, err)
	}
	if got, _ := host.NFT().SourceCheckAddrs(nft.SrcCheckRouted, port); len(got) != 0 {
		t.Errorf("after the DELs the host end keeps %v", got)
	}

	// Opted out, the same pod sends as anyone.
	podIPs(t, n.Must(azurevnet.Role, "ADD", attacker, off))
	if got, _ := host.NFT().SourceCheckAddrs(nft.SrcCheckRouted, port); len(got) != 0 {
		t.Errorf(`with "ipspoofchk": false the host end is checked: %v`, got)
	}
	for i, vip := range vips {
		sink := nstest.ListenUDP(t, victim.Netns, vip)
		if !nstest.SendFrom(t, attacker.Netns, foreign[i], sink, 10*time.Second) {
			t.Errorf(`with "ipspoofchk": false a datagram from %s did not arrive`, foreign[i])
		}
	}
	if err := nstest.SendARPRequest(t, attacker.Netns, "eth0", vips[0], gw); err != nil {
		t.Fatal(err)
	}
	if !hasNeigh(t, "", port, vips[0], 10*time.Second) {
		t.Errorf(`with "ipspoofchk": false the node did not learn %s at %s: the test cannot see a forged ARP`, vips[0], port)
	}
	n.Must(azurevnet.Role, "DEL", attacker, off)
	n.Must(azurevnet.Role, "DEL", attacker, off)

	// The victim's host end goes without a DEL: GC removes its check.
	vport := azurevnet.HostVethName(victim.ID, "eth0")
	if err := host.DeleteLink(vport); err != nil {
		t.Fatal(err)
	}
	n.Must(azurevnet.Role, "GC", victim, roletest.WithKeep(t, tconf("1.1.0", "")))
	if ports, _ := host.NFT().SourceCheckPorts(nft.SrcCheckRouted); slices.Contains(ports, vport) {
		t.Errorf("GC left the check of %s, whose host end is gone: %v", vport, ports)
	}
	n.Empty("aznet")
}

// TestCheckSourceCheck: CHECK passes while the host end's check holds the
// pod's addresses; with the check gone (a flushed ruleset) it fails with
// code 5 naming the host end, the tables and each address; with one
// address's element gone it names that one; once the elements are back it
// passes again. A network with "ipspoofchk": false has nothing to check.
func TestCheckSourceCheck(t *testing.T) {
	n := roletest.NewNode(t, azurevnet.Role, hostlocal.Role)
	host := roletest.Open(t, "")
	nicNode(t, host)
	on := tconf("1.0.0", "")
	p := n.NewPod("pod")
	out := n.Must(azurevnet.Role, "ADD", p, on)
	ips := podIPs(t, out)
	port := azurevnet.HostVethName(p.ID, "eth0")
	n.Must(azurevnet.Role, "CHECK", p, roletest.WithPrev(t, on, out))
	checkFails := func(words ...string) {
		t.Helper()
		_, err := n.Call(azurevnet.Role, "CHECK", p, roletest.WithPrev(t, on, out))
		if err == nil || roletest.Code(err) != 5 {
			t.Fatalf("CHECK: %v, want code 5", err)
		}
		for _, word := range append([]string{"ipspoofchk", port, "DEL and ADD"}, words...) {
			if !strings.Contains(err.Error(), word) {
				t.Errorf("CHECK's error does not name %q: %v", word, err)
			}
		}
	}

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(host.NFT().DeleteSourceCheck(nft.SrcCheckRouted, port, nil))
	checkFails("table inet cnibox-src has no element for the port", "table arp cnibox-src has no element for the port", ips[0].String(), ips[1].String())
	// The port and its IPv4 address are back, its IPv6 address is not.
	must(host.NFT().EnsureSourceCheck(nft.SrcCheckRouted, port, ips[:1]))
	checkFails("table inet cnibox-src has no element for the pod's addresses " + ips[1].String() + " (set addr6)")
	must(host.NFT().EnsureSourceCheck(nft.SrcCheckRouted, port, ips))
	n.Must(azurevnet.Role, "CHECK", p, roletest.WithPrev(t, on, out))
	n.Must(azurevnet.Role, "DEL", p, on)

	off := tconf("1.0.0", `,"ipspoofchk":false`)
	out = n.Must(azurevnet.Role, "ADD", p, off)
	n.Must(azurevnet.Role, "CHECK", p, roletest.WithPrev(t, off, out))
	n.Must(azurevnet.Role, "DEL", p, off)
	n.Must(azurevnet.Role, "DEL", p, off)
	n.Empty("aznet")
}
