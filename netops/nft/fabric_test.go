package nft_test

import (
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/google/nftables"
)

// azureLab is Azure's bridge mode in namespaces: a node whose eth0 (MAC and
// address of the Azure fixture) is a veth to a "fabric" namespace holding
// the subnet's gateway, and a pod on bridge azure0.
type azureLab struct {
	node, fabric, pod *netops.Handle
	nicMAC, podMAC    net.HardwareAddr
}

var (
	nodeIP  = netip.MustParsePrefix("10.240.0.35/16")
	podIP   = netip.MustParsePrefix("10.240.0.36/16")
	fabricG = netip.MustParsePrefix("10.240.0.1/16")
)

func newAzureLab(t *testing.T) *azureLab {
	t.Helper()
	l := &azureLab{node: openNS(t, "an"), fabric: openNS(t, "af"), pod: openNS(t, "ap")}
	l.nicMAC, _ = net.ParseMAC("00:0d:3a:51:c4:90")
	_, _, err := l.node.EnsureVeth(netops.VethOpts{HostName: "eth0", PeerName: "eth0", Peer: l.fabric, HostMAC: l.nicMAC})
	must(t, err)
	must(t, l.node.EnsureAddr("eth0", nodeIP, netops.AddrOpts{}))
	must(t, l.node.EnsureRoute(netops.Route{GW: fabricG.Addr(), Dev: "eth0"}))
	must(t, l.node.EnsureRoute(netops.Route{Dst: netip.MustParsePrefix("192.168.7.0/24"), GW: netip.MustParseAddr("10.240.0.9"), Dev: "eth0"}))
	must(t, l.fabric.EnsureAddr("eth0", fabricG, netops.AddrOpts{}))
	// The node routes nothing. What the test proves is the bridge's: the
	// fabric, holding the NIC's MAC for the pod, reaches it only through
	// the fabric element. A node forwarding IP would route that frame
	// (addressed to the NIC's MAC, which azure0 now has) to the pod by
	// itself and hide the element's absence: with the machine's
	// ip_forward=1 inherited, "reached the pod without its element".
	must(t, l.node.SetSysctls(netops.SysctlSetting{Key: "net.ipv4.conf.all.forwarding", Value: "0"},
		netops.SysctlSetting{Key: "net.ipv4.conf.default.forwarding", Value: "0"}))
	return l
}

func TestEnsureUplinkAndFabric(t *testing.T) {
	t.Parallel()
	l := newAzureLab(t)
	br, err := l.node.EnsureBridge(netops.BridgeOpts{Name: "azure0"})
	must(t, err)

	res, err := l.node.EnsureUplink(netops.UplinkOpts{Uplink: "eth0", Bridge: "azure0"})
	must(t, err)
	if !slices.Equal(res.Moved, []netip.Prefix{nodeIP}) || len(res.MovedRoutes) != 2 || res.MovedRoutes[0].Dst.Bits() != 0 && res.MovedRoutes[1].Dst.Bits() != 0 {
		t.Errorf("moved %v and routes %v", res.Moved, res.MovedRoutes)
	}
	eth0, err := l.node.LinkByName("eth0")
	must(t, err)
	brl, err := l.node.LinkByName("azure0")
	must(t, err)
	if eth0.MasterIndex != br.Index || brl.MAC.String() != l.nicMAC.String() {
		t.Errorf("eth0 master %d (bridge %d), bridge MAC %s (NIC %s)", eth0.MasterIndex, br.Index, brl.MAC, l.nicMAC)
	}
	if a, _ := l.node.Addrs("eth0"); len(a) != 0 {
		t.Errorf("eth0 still has %v", a)
	}
	if a, _ := l.node.Addrs("azure0"); !slices.Equal(a, []netip.Prefix{nodeIP}) {
		t.Errorf("azure0 has %v, want %v", a, nodeIP)
	}
	routes, err := l.node.Routes("azure0")
	must(t, err)
	var gws []string
	for _, r := range routes {
		if r.GW.IsValid() {
			gws = append(gws, r.Dst.String()+" via "+r.GW.String())
		}
	}
	slices.Sort(gws)
	if want := []string{"0.0.0.0/0 via 10.240.0.1", "192.168.7.0/24 via 10.240.0.9"}; !slices.Equal(gws, want) {
		t.Errorf("routes via azure0 %v, want %v", gws, want)
	}
	// Again: nothing to do.
	res, err = l.node.EnsureUplink(netops.UplinkOpts{Uplink: "eth0", Bridge: "azure0"})
	must(t, err)
	if len(res.Moved)+len(res.MovedRoutes) != 0 || res.MAC.String() != l.nicMAC.String() {
		t.Errorf("second call moved %v %v", res.Moved, res.MovedRoutes)
	}
	// The node still reaches the fabric, now through the bridge.
	if got := nstest.SeenFrom(t, l.node.Path(), nstest.Serve(t, l.fabric.Path(), fabricG.Addr())); got != nodeIP.Addr() {
		t.Errorf("fabric saw the node as %v", got)
	}
	// Wrong uses.
	if _, err := l.node.EnsureUplink(netops.UplinkOpts{Uplink: "azure0", Bridge: "azure0"}); err == nil {
		t.Error("a bridge as its own uplink was accepted")
	}
	if _, err := l.node.EnsureUplink(netops.UplinkOpts{Uplink: "eth0", Bridge: "eth0"}); err == nil {
		t.Error("a NIC as the bridge was accepted")
	}

	// A pod on the bridge, addressed out of the NIC's subnet.
	pv, _, err := l.node.EnsureVeth(netops.VethOpts{HostName: "azvtest", PeerName: "eth0", Peer: l.pod, Master: "azure0"})
	must(t, err)
	_ = pv
	podEth, err := l.pod.LinkByName("eth0")
	must(t, err)
	l.podMAC = podEth.MAC
	must(t, l.pod.EnsureAddr("eth0", podIP, netops.AddrOpts{}))
	must(t, l.pod.EnsureRoute(netops.Route{GW: fabricG.Addr(), Dev: "eth0"}))

	must(t, l.node.NFT().DeleteFabricPods([]netip.Addr{podIP.Addr()})) // nothing there yet
	must(t, l.node.NFT().EnsureFabricUplink("eth0", l.nicMAC))
	must(t, l.node.NFT().EnsureFabricUplink("eth0", l.nicMAC))
	must(t, l.node.NFT().EnsureFabricPods([]netip.Addr{podIP.Addr(), netip.MustParseAddr("fd00::5")}, l.podMAC))
	must(t, l.node.NFT().EnsureFabricPods([]netip.Addr{podIP.Addr()}, l.podMAC))
	pods, err := l.node.NFT().FabricPods()
	must(t, err)
	if len(pods) != 2 || pods[podIP.Addr()].String() != l.podMAC.String() || pods[netip.MustParseAddr("fd00::5")].String() != l.podMAC.String() {
		t.Errorf("fabric pods %v", pods)
	}
	must(t, l.node.NFT().DeleteFabricPods([]netip.Addr{netip.MustParseAddr("fd00::5")}))
	ups, err := l.node.NFT().FabricUplinks()
	must(t, err)
	if len(ups) != 1 || ups["eth0"].String() != l.nicMAC.String() {
		t.Errorf("fabric uplinks %v", ups)
	}

	// The fabric reaches the pod by its IP and knows it by the NIC's MAC.
	if got := nstest.SeenFrom(t, l.fabric.Path(), nstest.Serve(t, l.pod.Path(), podIP.Addr())); got != fabricG.Addr() {
		t.Errorf("pod saw the fabric as %v", got)
	}
	neighs, err := l.fabric.Neighs("eth0")
	must(t, err)
	found := false
	for _, n := range neighs {
		if n.IP == podIP.Addr() {
			found = true
			if n.MAC.String() != l.nicMAC.String() {
				t.Errorf("the fabric has %s for the pod, want the NIC's MAC %s", n, l.nicMAC)
			}
		}
	}
	if !found {
		t.Errorf("the fabric has no neighbour entry for the pod: %v", neighs)
	}
	// The pod reaches the fabric (its ARP for the gateway is answered).
	if got := nstest.SeenFrom(t, l.pod.Path(), nstest.Serve(t, l.fabric.Path(), fabricG.Addr())); got != podIP.Addr() {
		t.Errorf("fabric saw the pod as %v", got)
	}
	// A re-created pod with another MAC replaces the element.
	other := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x36}
	must(t, l.node.NFT().EnsureFabricPods([]netip.Addr{podIP.Addr()}, other))
	if pods, _ := l.node.NFT().FabricPods(); pods[podIP.Addr()].String() != other.String() {
		t.Errorf("element not replaced: %v", pods)
	}
	must(t, l.node.NFT().EnsureFabricPods([]netip.Addr{podIP.Addr()}, l.podMAC))

	// Without its element the pod is not reached any more.
	must(t, l.node.NFT().DeleteFabricPods([]netip.Addr{podIP.Addr()}))
	must(t, l.node.NFT().DeleteFabricPods([]netip.Addr{podIP.Addr()}))
	if pods, _ := l.node.NFT().FabricPods(); len(pods) != 0 {
		t.Errorf("fabric pods after delete: %v", pods)
	}
	srv := nstest.Serve(t, l.pod.Path(), podIP.Addr())
	if err := dial(t, l.fabric.Path(), srv); err == nil {
		t.Error("the fabric reached the pod without its element")
	}
	must(t, l.node.NFT().DeleteFabric())
	must(t, l.node.NFT().DeleteFabric())
	checkBridgeChains(t, l.node, nil)
}

// TestFabricRulesOnce: calls racing to install the fabric rules leave one
// copy of each rule.
func TestFabricRulesOnce(t *testing.T) {
	t.Parallel()
	node := openNS(t, "fr")
	mac, _ := net.ParseMAC("00:0d:3a:51:c4:90")
	errs := make(chan error)
	for range 8 {
		go func() {
			h, err := netops.Open(node.Path())
			if err == nil {
				err = h.NFT().EnsureFabricUplink("eth0", mac)
				h.Close()
			}
			errs <- err
		}()
	}
	for range 8 {
		must(t, <-errs)
	}
	ns, err := openNSFile(node.Path())
	must(t, err)
	defer ns.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns.Fd())))
	must(t, err)
	table := &nftables.Table{Name: nft.MasqTable, Family: nftables.TableFamilyBridge}
	for chain, want := range map[string]int{"fabric-pre": 3, "fabric-post": 5} {
		rules, err := c.GetRules(table, &nftables.Chain{Name: chain, Table: table})
		must(t, err)
		if len(rules) != want {
			t.Errorf("chain %s has %d rules, want %d", chain, len(rules), want)
		}
	}
}
