package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/azurevnet"
)

// The node of the transparent-mode tests: the seed host agent's answer
// (NIC 00:0d:3a:51:c4:90, primary 10.240.0.35 in 10.240.0.0/16, secondary
// IPs 10.240.0.36-65), the fabric's gateway 10.240.0.1, and node-local
// DNS's address 169.254.20.10 on the node, as AKS's ipsToRouteViaHost names
// it.
const (
	tpMAC = "00:0d:3a:51:c4:90"
)

var (
	tpNode     = netip.MustParsePrefix("10.240.0.35/16")
	tpGateway  = netip.MustParsePrefix("10.240.0.1/16")
	tpLocalDNS = netip.MustParseAddr("169.254.20.10")
	tpHostMAC  = "aa:aa:aa:aa:aa:aa"
)

// transparentNode makes the test's node an AKS VM for the transparent
// tests: the host agent serving the seed answer, eth0 to the fabric, and
// the fabric's side of Azure's SDN. The SDN delivers a frame for any IP
// configuration of a NIC to that NIC's MAC (a VM never answers ARP for its
// secondary IPs: the host platform does), which the fabric namespace holds
// as a permanent neighbour entry per secondary IP. It also puts node-local
// DNS's address on the node's lo. It returns the fabric namespace.
func transparentNode(t *testing.T) string {
	t.Helper()
	xml, err := os.ReadFile(filepath.Join("testdata", "nmagent-getinterfaceinfov1.xml"))
	must(t, err)
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/machine/plugins" || r.URL.Query().Get("type") != "getinterfaceinfov1" {
			http.NotFound(w, r)
			return
		}
		w.Write(xml)
	}))
	t.Cleanup(agent.Close)
	t.Setenv("CNIBOX_CLOUD_ENDPOINT", agent.URL+"/machine/plugins?comp=nmagent&type=getinterfaceinfov1")
	fabric := cloudNode(t, tpMAC, tpNode, tpGateway, "azure0")
	fh, err := netops.Open(fabric)
	must(t, err)
	defer fh.Close()
	nic, _ := net.ParseMAC(tpMAC)
	for _, ip := range tpPool() {
		must(t, fh.EnsureNeigh("eth0", ip, nic))
	}
	host := hostHandle(t)
	must(t, host.EnsureAddr("lo", netip.PrefixFrom(tpLocalDNS, 32), addrOpts()))
	t.Cleanup(func() {
		if h, err := netops.Open(""); err == nil {
			h.DeleteAddr("lo", netip.PrefixFrom(tpLocalDNS, 32))
			h.Close()
		}
	})
	return fabric
}

// tpPool is the NIC's secondary IPs in the seed answer.
func tpPool() []netip.Addr {
	var out []netip.Addr
	for i := 36; i <= 65; i++ {
		out = append(out, netip.MustParseAddr(fmt.Sprintf("10.240.0.%d", i)))
	}
	return out
}

// TestAzureTransparentAKSConflist runs Azure's own cni/azure-linux.conflist
// (what AKS ships: azure-vnet in transparent mode, ipsToRouteViaHost
// 169.254.20.10, azure-vnet-ipam, portmap with snat), byte for byte, on a
// simulated AKS node: pods reach each other, the fabric reaches a pod, a pod
// reaches 169.254.20.10 on the node, hostPort works, the pod's and the
// node's side are what Azure's code sets field by field, and DEL (twice)
// leaves nothing behind.
func TestAzureTransparentAKSConflist(t *testing.T) {
	e := newEnv(t)
	pmNoDAD(t)
	fabric := transparentNode(t)
	l := loadList(t, filepath.Join("testdata", "azure-linux.conflist"))
	if ex := loadList(t, repoFile("examples", "74-azure-transparent.conflist")); !bytes.Equal(ex.Bytes, l.Bytes) {
		t.Errorf("examples/74-azure-transparent.conflist differs from Azure's cni/azure-linux.conflist")
	}
	const hostPort = 18091
	pods := []*pod{e.newPod("a"), e.newPod("b"), e.newPod("c")}
	pods[0].rt.CapabilityArgs = pmCapability(hostPort)
	ips := make([]netip.Addr, len(pods))
	for i, p := range pods {
		res := e.add(l, p)
		ips[i] = podIP(t, res, true)
		if !slices.Contains(tpPool(), ips[i]) || slices.Contains(ips[:i], ips[i]) {
			t.Fatalf("pod %d got %s: want a secondary IP not yet handed out", i, ips[i])
		}
		// The result is Azure's: IPAM's address, gateway, routes and DNS.
		if ipc := res.IPs[0]; ipc.Address.String() != ips[i].String()+"/16" || ipc.Gateway.String() != "10.240.0.1" {
			t.Errorf("pod %d: result address %s gateway %s, want %s/16 via 10.240.0.1", i, ipc.Address.String(), ipc.Gateway, ips[i])
		}
		if !slices.Equal(res.DNS.Nameservers, []string{"168.63.129.16"}) {
			t.Errorf("pod %d: result DNS %v, want Azure's 168.63.129.16", i, res.DNS.Nameservers)
		}
		tpCheckPod(t, p, ips[i], tpNode.Bits())
	}
	tpCheckNode(t, pods, ips)

	// Pod to pod on the node, the fabric to a pod and back, a pod to
	// node-local DNS (the node sees the pod's own address).
	if err := reachable(t, pods[0].netns, pods[1].netns, ips[1]); err != nil {
		t.Errorf("pod a cannot reach pod b at %s: %v", ips[1], err)
	}
	if err := reachable(t, pods[2].netns, pods[0].netns, ips[0]); err != nil {
		t.Errorf("pod c cannot reach pod a at %s: %v", ips[0], err)
	}
	for i, p := range pods {
		if err := reachable(t, fabric, p.netns, ips[i]); err != nil {
			t.Errorf("the fabric cannot reach pod %d at %s: %v", i, ips[i], err)
		}
	}
	if err := reachable(t, pods[1].netns, fabric, tpGateway.Addr()); err != nil {
		t.Errorf("pod b cannot reach the fabric at %s: %v", tpGateway.Addr(), err)
	}
	if from, err := tpPeerOf(t, pods[1].netns, tpLocalDNS, 10*time.Second); err != nil || from != ips[1] {
		t.Errorf("pod b to node-local DNS %s: seen from %v (%v), want the pod's %s", tpLocalDNS, from, err, ips[1])
	}

	// hostPort: from the fabric to the node's address, from the node and
	// from another pod.
	pmServe(t, pods[0].netns, pods[0].id)
	if body, err := pmFetch(t, fabric, tpNode.Addr(), hostPort); err != nil || body != pods[0].id {
		t.Errorf("from the fabric: GET %s:%d = %q, %v; want %q", tpNode.Addr(), hostPort, body, err, pods[0].id)
	}
	for _, to := range []netip.Addr{netip.MustParseAddr("127.0.0.1"), tpNode.Addr()} {
		if body, err := pmFetch(t, "", to, hostPort); err != nil || body != pods[0].id {
			t.Errorf("from the node: GET %s:%d = %q, %v; want %q", to, hostPort, body, err, pods[0].id)
		}
	}
	if body, err := pmFetch(t, pods[2].netns, tpNode.Addr(), hostPort); err != nil || body != pods[0].id {
		t.Errorf("from pod c: GET %s:%d = %q, %v; want %q", tpNode.Addr(), hostPort, body, err, pods[0].id)
	}
	// After traffic the pod's entry for its gateway was confirmed by the
	// host end's proxy ARP answer: still the host end's MAC.
	if n, ok := tpNeigh(t, pods[1].netns, "169.254.1.1"); !ok || n.MAC.String() != tpHostMAC || n.State == "FAILED" || n.State == "INCOMPLETE" {
		t.Errorf("pod b's neighbour 169.254.1.1 after traffic: %+v, want lladdr %s, resolved", n, tpHostMAC)
	}

	for i, p := range pods {
		e.del(l, p)
		e.del(l, p)
		if got := azvVeths(t); len(got) != len(pods)-1-i {
			t.Errorf("azv veths after %d DELs: %v", i+1, got)
		}
	}
	host := hostHandle(t)
	if rs, err := host.RouteDetails("eth0"); err == nil {
		for _, r := range rs {
			if r.Dst.Bits() == 32 && slices.Contains(ips, r.Dst.Addr()) {
				t.Errorf("route to a pod left after DEL: %s", r)
			}
		}
	}
	if got := e.reservations(l.Name); len(got) != 0 {
		t.Errorf("reservations left after DEL: %v", got)
	}
	if owners := pmOwners(t); len(owners) != 0 {
		t.Errorf("portmap elements after DEL: %v", owners)
	}
	if body, err := pmFetch(t, "", tpNode.Addr(), hostPort); err == nil {
		t.Errorf("after DEL: GET %s:%d reached %q", tpNode.Addr(), hostPort, body)
	}
}

// tpCheckPod compares the pod's side with what Azure's transparent
// endpoint client leaves (network/transparent_endpointclient_linux.go):
// eth0 a veth with the NIC's MTU and the pod's address with IPAM's prefix;
// the kernel's subnet route removed; "169.254.1.1 dev eth0 proto static
// scope link" and "default via 169.254.1.1 dev eth0 proto static"; a
// neighbour entry 169.254.1.1 lladdr aa:aa:aa:aa:aa:aa, set in state PROBE
// (so never PERMANENT); router advertisements not accepted.
func tpCheckPod(t *testing.T, p *pod, ip netip.Addr, bits int) {
	t.Helper()
	h, err := netops.Open(p.netns)
	must(t, err)
	defer h.Close()
	l, err := h.LinkByName("eth0")
	must(t, err)
	if l.Kind != "veth" || l.MTU != 1500 || !l.Up {
		t.Errorf("pod %s eth0: kind %s mtu %d up %v, want an up veth with the NIC's mtu 1500", p.id, l.Kind, l.MTU, l.Up)
	}
	if addrs, _ := h.Addrs("eth0"); !slices.Equal(addrs, []netip.Prefix{netip.PrefixFrom(ip, bits)}) {
		t.Errorf("pod %s addresses %v, want only %s/%d", p.id, addrs, ip, bits)
	}
	rs, err := h.RouteDetails("eth0")
	must(t, err)
	var v4 []string
	for _, r := range rs {
		if r.Dst.Addr().Is4() {
			v4 = append(v4, r.String())
		} else if r.Dst.Bits() == 0 {
			t.Errorf("pod %s has an IPv6 default route %s (Azure's IPv4 pods have none)", p.id, r)
		}
	}
	want := []string{
		"0.0.0.0/0 via 169.254.1.1 dev eth0 proto static scope universe",
		"169.254.1.1/32 dev eth0 proto static scope link",
	}
	slices.Sort(v4)
	slices.Sort(want)
	if !slices.Equal(v4, want) {
		t.Errorf("pod %s IPv4 routes:\n  %s\nwant:\n  %s", p.id, strings.Join(v4, "\n  "), strings.Join(want, "\n  "))
	}
	if n, ok := tpNeigh(t, p.netns, "169.254.1.1"); !ok || n.MAC.String() != tpHostMAC || n.Permanent {
		t.Errorf("pod %s neighbour 169.254.1.1: %+v (found %v), want lladdr %s set as PROBE", p.id, n, ok, tpHostMAC)
	}
	if v, err := h.Sysctl("net/ipv6/conf/eth0/accept_ra"); err != nil || v != "0" {
		t.Errorf("pod %s accept_ra on eth0 = %q, %v; want 0", p.id, v, err)
	}
}

// tpCheckNode compares the node's side with Azure's: no bridge, eth0 left
// alone with the node's address and default route, no fabric rules; per pod
// a host veth azv<hash> with MAC aa:aa:aa:aa:aa:aa, the NIC's MTU, no
// address, no master, proxy ARP on, and "IP dev HOSTVETH proto static".
func tpCheckNode(t *testing.T, pods []*pod, ips []netip.Addr) {
	t.Helper()
	host := hostHandle(t)
	if _, err := host.LinkByName("azure0"); err == nil {
		t.Error("transparent mode made bridge azure0")
	}
	eth0, err := host.LinkByName("eth0")
	must(t, err)
	if eth0.MasterIndex != 0 || eth0.MAC.String() != tpMAC {
		t.Errorf("eth0 changed: master %d MAC %s", eth0.MasterIndex, eth0.MAC)
	}
	if a, _ := host.Addrs("eth0"); !slices.Contains(a, tpNode) {
		t.Errorf("eth0 has %v, want the node's %s", a, tpNode)
	}
	if fp, err := host.NFT().FabricPods(); err != nil || len(fp) != 0 {
		t.Errorf("fabric elements in transparent mode: %v, %v", fp, err)
	}
	if v, err := host.Sysctl("net.ipv4.ip_forward"); err != nil || v != "1" {
		t.Errorf("ip_forward = %q, %v; want 1", v, err)
	}
	veths := azvVeths(t)
	if len(veths) != len(pods) {
		t.Fatalf("azv veths %v for %d pods", veths, len(pods))
	}
	for i := range pods {
		var hv netops.Link
		for _, name := range veths {
			rs, _ := host.RouteDetails(name)
			for _, r := range rs {
				if r.Dst == netip.PrefixFrom(ips[i], 32) {
					hv, _ = host.LinkByName(name)
					if got, want := r.String(), fmt.Sprintf("%s/32 dev %s proto static scope universe", ips[i], name); got != want {
						t.Errorf("node route to pod %d: %q, want %q", i, got, want)
					}
				}
			}
		}
		if hv.Name == "" {
			t.Errorf("no host veth routes pod %d's %s", i, ips[i])
			continue
		}
		if hv.MAC.String() != tpHostMAC || hv.MTU != 1500 || hv.MasterIndex != 0 || !hv.Up {
			t.Errorf("host veth %s: MAC %s mtu %d master %d up %v, want %s, 1500, none, up", hv.Name, hv.MAC, hv.MTU, hv.MasterIndex, hv.Up, tpHostMAC)
		}
		if a, _ := host.Addrs(hv.Name); slices.ContainsFunc(a, func(p netip.Prefix) bool { return p.Addr().Is4() }) {
			t.Errorf("host veth %s holds %v: Azure's has no IPv4 address", hv.Name, a)
		}
		if v, err := host.Sysctl("net/ipv4/conf/" + hv.Name + "/proxy_arp"); err != nil || v != "1" {
			t.Errorf("proxy_arp on %s = %q, %v; want 1", hv.Name, v, err)
		}
	}
}

// tpNeigh returns the neighbour entry for ip on eth0 in ns.
func tpNeigh(t *testing.T, ns, ip string) (netops.NeighDetail, bool) {
	t.Helper()
	h, err := netops.Open(ns)
	must(t, err)
	defer h.Close()
	list, err := h.NeighDetails("eth0")
	must(t, err)
	for _, n := range list {
		if n.IP.String() == ip {
			return n, true
		}
	}
	return netops.NeighDetail{}, false
}

// tpPeerOf listens on to:53 (TCP) on the node and dials it from ns (giving
// up after wait); it returns the source address the node saw.
func tpPeerOf(t *testing.T, ns string, to netip.Addr, wait time.Duration) (netip.Addr, error) {
	t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(to, 53).String())
	if err != nil {
		return netip.Addr{}, err
	}
	defer ln.Close()
	seen := make(chan netip.Addr, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		seen <- c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
		c.Close()
	}()
	var derr error
	must(t, nstest.Run(t, ns, func() error {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), wait)
		if err == nil {
			c.Close()
		}
		derr = err
		return nil
	}))
	if derr != nil {
		return netip.Addr{}, derr
	}
	select {
	case a := <-seen:
		return a, nil
	case <-time.After(10 * time.Second):
		return netip.Addr{}, fmt.Errorf("the node accepted nothing")
	}
}

// TestAzureTransparentVerbs: the AKS conflist at spec 1.1.0 (as a runtime
// that speaks it would pass it): CHECK passes and notices the node's route
// to the pod gone, GC keeps the listed pod and removes the other's veth,
// routes, record and address, STATUS answers, DEL twice.
func TestAzureTransparentVerbs(t *testing.T) {
	e := newEnv(t)
	transparentNode(t)
	l := withVersion(t, loadList(t, filepath.Join("testdata", "azure-linux.conflist")), "1.1.0")
	keep, drop := e.newPod("keep"), e.newPod("drop")
	ipKeep := podIP(t, e.add(l, keep), true)
	ipDrop := podIP(t, e.add(l, drop), true)
	ctx := context.Background()
	if err := e.cni.CheckNetworkList(ctx, l, keep.rt); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	host := hostHandle(t)
	routeTo := func(ip netip.Addr) (netops.Route, bool) {
		rs, err := host.Routes("")
		must(t, err)
		for _, r := range rs {
			if r.Dst == netip.PrefixFrom(ip, 32) {
				return r, true
			}
		}
		return netops.Route{}, false
	}
	r, ok := routeTo(ipDrop)
	if !ok {
		t.Fatalf("no node route to %s", ipDrop)
	}
	must(t, host.DeleteRoute(r))
	if err := e.cni.CheckNetworkList(ctx, l, drop.rt); err == nil || !strings.Contains(err.Error(), ipDrop.String()) {
		t.Errorf("CHECK without the node's route to %s: %v, want an error naming it", ipDrop, err)
	}
	if err := e.cni.GCNetworkList(ctx, l, &libcni.GCArgs{ValidAttachments: []types.GCAttachment{{ContainerID: keep.id, IfName: "eth0"}}}); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if got := azvVeths(t); len(got) != 1 {
		t.Errorf("azv veths after GC: %v, want the kept pod's", got)
	}
	if rs := e.reservations(l.Name); len(rs) != 1 || rs[0].Addr != ipKeep {
		t.Errorf("reservations after GC: %+v, want %s only", rs, ipKeep)
	}
	if _, ok := routeTo(ipKeep); !ok {
		t.Errorf("GC removed the kept pod's route")
	}
	if err := e.cni.GetStatusNetworkList(ctx, l); err != nil {
		t.Errorf("STATUS: %v", err)
	}
	// A pod whose namespace went before its DEL (containerd's second DEL
	// has none either): DEL twice frees its address, its veth is gone.
	gone, rm := e.newPodOwnNS("gone")
	e.add(l, gone)
	rm()
	gone.rt.NetNS = ""
	e.del(l, gone)
	e.del(l, gone)
	waitLinkGone(t, azureHostVeth(gone.id))
	for _, p := range []*pod{keep, drop} {
		e.del(l, p)
		e.del(l, p)
	}
	if got := azvVeths(t); len(got) != 0 {
		t.Errorf("veths left after DEL: %v", got)
	}
	if got := e.reservations(l.Name); len(got) != 0 {
		t.Errorf("reservations left: %v", got)
	}
}

// TestAzureModeSwitch: pods added in bridge mode are removed whole (veth,
// fabric element, address) by DEL with the config switched to transparent,
// and the next pod is a transparent one, next to them.
func TestAzureModeSwitch(t *testing.T) {
	e := newEnv(t)
	fabric := transparentNode(t)
	bridgeList := loadList(t, repoFile("examples", "75-azure.conflist"))
	transparentList := loadList(t, filepath.Join("testdata", "azure-linux.conflist"))
	old := e.newPod("old")
	ipOld := podIP(t, e.add(bridgeList, old), true)
	host := hostHandle(t)
	if fp, _ := host.NFT().FabricPods(); fp[ipOld] == nil {
		t.Fatalf("bridge mode: no fabric element for %s", ipOld)
	}
	// Back from bridge mode: the NIC leaves the bridge with its address and
	// routes, as an operator's reboot or script would do.
	must(t, host.DeleteLink("azure0"))
	must(t, host.EnsureAddr("eth0", tpNode, addrOpts()))
	must(t, host.EnsureRoute(netops.Route{GW: tpGateway.Addr(), Dev: "eth0"}))
	newer := e.newPod("new")
	ipNew := podIP(t, e.add(transparentList, newer), true)
	if err := reachable(t, fabric, newer.netns, ipNew); err != nil {
		t.Errorf("the fabric cannot reach the transparent pod at %s: %v", ipNew, err)
	}
	e.del(transparentList, old)
	e.del(transparentList, old)
	if fp, _ := host.NFT().FabricPods(); fp[ipOld] != nil {
		t.Errorf("DEL in transparent mode left the bridge-mode pod's fabric element %s", ipOld)
	}
	e.del(transparentList, newer)
	if got := azvVeths(t); len(got) != 0 {
		t.Errorf("veths left after DEL: %v", got)
	}
	if got := e.reservations(transparentList.Name); len(got) != 0 {
		t.Errorf("reservations left: %v", got)
	}
}

// TestAzureTransparentDualStack: a transparent pod with an IPv6 address too
// (the file provider's dual-stack pool; Azure takes IPv6 from ipv6Mode)
// gets Azure's IPv6 layout: "fe80::1234:5678:9abc dev eth0 proto static",
// the default route through it and a permanent neighbour entry with the
// host end's MAC; the fabric reaches the pod's IPv6 address and the pod
// the fabric's.
func TestAzureTransparentDualStack(t *testing.T) {
	e := newEnv(t)
	pmNoDAD(t)
	pools := filepath.Join(t.TempDir(), "pools.json")
	must(t, os.WriteFile(pools, []byte(`{"interfaces": [
		{"mac": "`+tpMAC+`", "subnet": "10.240.0.0/16", "primary": ["10.240.0.35"], "addresses": ["10.240.0.36-10.240.0.37"]},
		{"mac": "`+tpMAC+`", "subnet": "fd00:240::/64", "primary": ["fd00:240::23"], "addresses": ["fd00:240::24-fd00:240::25"]}
	]}`), 0o644))
	fabric := cloudNode(t, tpMAC, tpNode, tpGateway, "azure0")
	fh, err := netops.Open(fabric)
	must(t, err)
	defer fh.Close()
	gw6 := netip.MustParsePrefix("fd00:240::1/64")
	must(t, fh.EnsureAddr("eth0", gw6, addrOpts()))
	must(t, hostHandle(t).EnsureAddr("eth0", netip.MustParsePrefix("fd00:240::23/64"), addrOpts()))
	nic, _ := net.ParseMAC(tpMAC)
	for _, ip := range []string{"10.240.0.36", "fd00:240::24"} {
		must(t, fh.EnsureNeigh("eth0", netip.MustParseAddr(ip), nic))
	}
	l := listFromJSON(t, `{"cniVersion": "1.0.0", "name": "metal6", "plugins": [{"type": "azure-vnet", "mode": "transparent",
		"ipam": {"type": "cloud-ipam", "provider": "file", "endpoint": "`+pools+`"}}]}`)
	p := e.newPod("ds")
	res := e.add(l, p)
	ip4, ip6 := podIP(t, res, true), podIP(t, res, false)
	if ip4 != netip.MustParseAddr("10.240.0.36") || ip6 != netip.MustParseAddr("fd00:240::24") {
		t.Fatalf("pod got %v and %v, want 10.240.0.36 and fd00:240::24", ip4, ip6)
	}
	h, err := netops.Open(p.netns)
	must(t, err)
	defer h.Close()
	rs, err := h.RouteDetails("eth0")
	must(t, err)
	var v6 []string
	for _, r := range rs {
		if r.Dst.Addr().Is6() && !r.Dst.Addr().IsLinkLocalUnicast() || r.Dst.Bits() == 128 {
			v6 = append(v6, r.String())
		}
	}
	// The kernel gives IPv6 routes metric 1024 when none is set, as for Azure's.
	want := []string{"::/0 via fe80::1234:5678:9abc dev eth0 metric 1024 proto static scope universe", "fe80::1234:5678:9abc/128 dev eth0 metric 1024 proto static scope universe"}
	slices.Sort(v6)
	if !slices.Equal(v6, want) {
		t.Errorf("pod IPv6 routes (link-local /64 aside):\n  %s\nwant:\n  %s", strings.Join(v6, "\n  "), strings.Join(want, "\n  "))
	}
	if n, ok := tpNeigh(t, p.netns, "fe80::1234:5678:9abc"); !ok || n.MAC.String() != tpHostMAC || n.State != "PERMANENT" {
		t.Errorf("pod neighbour fe80::1234:5678:9abc: %+v (found %v), want lladdr %s PERMANENT", n, ok, tpHostMAC)
	}
	for _, ip := range []netip.Addr{ip4, ip6} {
		if err := reachable(t, fabric, p.netns, ip); err != nil {
			t.Errorf("the fabric cannot reach the pod at %s: %v", ip, err)
		}
	}
	if err := reachable(t, p.netns, fabric, gw6.Addr()); err != nil {
		t.Errorf("the pod cannot reach the fabric at %s: %v", gw6.Addr(), err)
	}
	e.del(l, p)
	e.del(l, p)
	if got := azvVeths(t); len(got) != 0 {
		t.Errorf("veths left after DEL: %v", got)
	}
	if got := e.reservations(l.Name); len(got) != 0 {
		t.Errorf("reservations left after DEL: %v", got)
	}
}

// TestAzureTransparentConcurrent: the node's whole pool (30 pods) added at
// once with the AKS conflist, before anything is cached: distinct secondary
// IPs, a host veth and route each, every pod reachable from the fabric and
// from another pod; then all deleted at once, leaving nothing.
func TestAzureTransparentConcurrent(t *testing.T) {
	e := newEnv(t)
	fabric := transparentNode(t)
	l := loadList(t, filepath.Join("testdata", "azure-linux.conflist"))
	pods := make([]*pod, len(tpPool()))
	for i := range pods {
		pods[i] = e.newPod(fmt.Sprint("t", i))
	}
	ips := e.addAtOnce(l, pods)
	for i, ip := range ips {
		if !slices.Contains(tpPool(), ip) {
			t.Fatalf("pod %d got %s: not a secondary IP of the node", i, ip)
		}
	}
	errs := make([]error, len(pods))
	done := make(chan int)
	if n := len(azvVeths(t)); n != len(pods) {
		t.Errorf("%d azv veths for %d pods", n, len(pods))
	}
	for _, i := range []int{0, len(pods) / 2, len(pods) - 1} {
		if err := reachable(t, fabric, pods[i].netns, ips[i]); err != nil {
			t.Errorf("the fabric cannot reach pod %d at %s: %v", i, ips[i], err)
		}
		j := (i + 1) % len(pods)
		if err := reachable(t, pods[j].netns, pods[i].netns, ips[i]); err != nil {
			t.Errorf("pod %d cannot reach pod %d at %s: %v", j, i, ips[i], err)
		}
	}
	for i, p := range pods {
		go func() {
			errs[i] = e.cni.DelNetworkList(context.Background(), l, p.rt)
			done <- i
		}()
	}
	for range pods {
		<-done
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("DEL %d: %v", i, err)
		}
	}
	if got := azvVeths(t); len(got) != 0 {
		t.Errorf("veths left after DEL: %v", got)
	}
	if got := e.reservations(l.Name); len(got) != 0 {
		t.Errorf("reservations left: %v", got)
	}
}

// TestAzureBridgeViaHost: in bridge mode ipsToRouteViaHost does what Azure's
// broute rule does: a pod reaches node-local DNS at 169.254.20.10 on the
// node (seen there with its own address), where without it the packet
// follows the default route to the fabric, which has no such address.
func TestAzureBridgeViaHost(t *testing.T) {
	e := newEnv(t)
	transparentNode(t)
	t.Cleanup(func() {
		if h, err := netops.Open(""); err == nil {
			h.NFT().DeleteViaHost()
			h.Close()
		}
	})
	plain := loadList(t, repoFile("examples", "75-azure.conflist"))
	p := e.newPod("plain")
	ip := podIP(t, e.add(plain, p), true)
	if from, err := tpPeerOf(t, p.netns, tpLocalDNS, 2*time.Second); err == nil {
		t.Errorf("without ipsToRouteViaHost the pod reached %s on the node (seen from %s): the test proves nothing", tpLocalDNS, from)
	}
	viaHost := listFromJSON(t, strings.Replace(string(plain.Bytes), `"bridge": "azure0",`, `"bridge": "azure0", "ipsToRouteViaHost": ["169.254.20.10"],`, 1))
	q := e.newPod("dns")
	ipq := podIP(t, e.add(viaHost, q), true)
	if from, err := tpPeerOf(t, q.netns, tpLocalDNS, 10*time.Second); err != nil || from != ipq {
		t.Errorf("with ipsToRouteViaHost: pod to %s seen from %v (%v), want the pod's %s", tpLocalDNS, from, err, ipq)
	}
	host := hostHandle(t)
	br, err := host.LinkByName("azure0")
	must(t, err)
	if vh, err := host.NFT().ViaHost(); err != nil || vh[tpLocalDNS].String() != br.MAC.String() {
		t.Errorf("via-host elements %v (%v), want %s -> azure0's MAC %s", vh, err, tpLocalDNS, br.MAC)
	}
	e.del(viaHost, q)
	e.del(plain, p)
	if got := e.reservations(plain.Name); len(got) != 0 {
		t.Errorf("reservations left: %v (pods %s, %s)", got, ip, ipq)
	}
}

// azureHostVeth is azure-vnet's host veth of a pod's eth0.
func azureHostVeth(id string) string { return azurevnet.HostVethName(id, "eth0") }
