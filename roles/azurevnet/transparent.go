package azurevnet

import (
	"context"
	"errors"
	"net"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/store"
)

// The fixed parts of Azure CNI's transparent mode
// (network/transparent_endpointclient_linux.go): every pod's gateway is
// 169.254.1.1 (fe80::1234:5678:9abc for IPv6), which no interface holds;
// the host end of every pod's veth has MAC aa:aa:aa:aa:aa:aa and answers ARP
// for it by proxy ARP. (The gateways are strings parsed where they are
// used: a netip.Addr at package level is built by code at every start.)
const (
	VirtualGW4 = "169.254.1.1"
	VirtualGW6 = "fe80::1234:5678:9abc"
)

// HostVethMAC is the MAC of the host end of every pod's veth.
var HostVethMAC = net.HardwareAddr{0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa}

// tconf is the config of transparent mode.
type tconf struct {
	conf
	// MTU of both veth ends; 0 = the node NIC's, as Azure sets it.
	MTU int       `json:"mtu"`
	DNS types.DNS `json:"dns"`
	// IPSpoofChk: what the pod sends must carry one of its addresses
	// (cnibox's own field, default on; false needs trust: srccheck.go).
	IPSpoofChk *bool `json:"ipspoofchk,omitempty"`
}

func parseTransparent(a *cniplug.Args, z conf) (*tconf, error) {
	c := &tconf{}
	if err := cniplug.DecodeConf("azure-vnet config", a.StdinData, c); err != nil {
		return nil, err
	}
	c.conf = z
	if c.MTU < 0 || c.MTU > 65535 || (c.MTU > 0 && c.MTU < 68) {
		return nil, cniplug.ConfError("mtu", "%d is out of range: leave it out (the node NIC's MTU) or use 68..65535", c.MTU)
	}
	if a.Conf.IPAM.Type == "" {
		return nil, cniplug.ConfError("ipam", `azure-vnet needs an IPAM plugin for the pod's addresses: add "ipam": {"type": "azure-vnet-ipam"}`)
	}
	return c, nil
}

// addTransparent is the ADD of transparent mode: the host end's source
// address check, the pod's veth with its host end aa:aa:aa:aa:aa:aa, proxy
// ARP on it and a route to each pod address through it; in the pod, the
// addresses without their subnet route, a link route to the virtual
// gateway, the default route through it and a neighbour entry for it with
// the host end's MAC.
func addTransparent(ctx context.Context, a *cniplug.Args, c *tconf) (_ types.Result, err error) {
	hostName := HostVethName(a.ContainerID, a.IfName)
	v, err := attach.BeginVethADD(a, hostName, deleteSourceCheck)
	if err != nil {
		return nil, err
	}
	defer v.Close()
	var undo cniplug.Undo
	defer undo.Finish(&err)

	var pod []netip.Prefix
	ipamRes, err := attach.ReserveUndone(ctx, a, c.DataDir, &undo, func(ipam *current.Result) (store.Endpoint, error) {
		pod = prefixes(ipam)
		return transparentRecord(a, hostName, v.MAC, pod), nil
	})
	if err != nil {
		return nil, err
	}
	mtu := c.MTU
	if mtu == 0 {
		if mtu, err = nicMTU(v.Host, c.Master, pod); err != nil {
			return nil, err
		}
	}
	if err := attach.EnableForwarding(v.Host, pod); err != nil {
		return nil, err
	}
	if err := checkSource(v.Host, &undo, c, hostName, pod); err != nil {
		return nil, err
	}
	hv, pv, err := attach.CreateVeth(v.Host, &undo, netops.VethOpts{HostName: hostName, PeerName: a.IfName, Peer: v.Pod,
		MTU: mtu, HostMAC: HostVethMAC, PeerMAC: v.MAC, IPv6: attach.VethIPv6(pod)})
	if err != nil {
		return nil, err
	}
	a.Mark("veth")
	if err := hostSide(v.Host, hostName, pod); err != nil {
		return nil, err
	}
	if err := podSide(v.Pod, a.IfName, pod); err != nil {
		return nil, err
	}
	a.Mark("routes")
	podIdx := 1
	res := &current.Result{CNIVersion: current.ImplementedSpecVersion,
		Interfaces: []*current.Interface{{Name: hv.Name, Mac: hv.MAC.String()}, {Name: pv.Name, Mac: pv.MAC.String(), Sandbox: a.Netns}},
		Routes:     ipamRes.Routes, DNS: attach.PickDNS(c.DNS, ipamRes.DNS)}
	for _, ipc := range ipamRes.IPs {
		res.IPs = append(res.IPs, &current.IPConfig{Interface: &podIdx, Address: ipc.Address, Gateway: ipc.Gateway})
	}
	undo.Discard()
	return res, nil
}

// transparentRecord is the endpoint record of a transparent attachment: its
// gateways and routes are the ones in the pod (the virtual gateway), not
// IPAM's, and Extra says the mode.
func transparentRecord(a *cniplug.Args, hostName string, mac net.HardwareAddr, pod []netip.Prefix) store.Endpoint {
	ep := attach.VethEndpoint(a, nil, hostName, mac, false)
	ep.IPs = pod
	ep.Extra = map[string]string{"mode": ModeTransparent}
	ep.Gateways, ep.Routes = PodGateways(pod)
	return ep
}

// PodGateways returns what a transparent pod with addresses pod routes
// through: the virtual gateways of its families and its default routes via
// them.
func PodGateways(pod []netip.Prefix) ([]netip.Addr, []store.Route) {
	gws := gateways(pod)
	routes := make([]store.Route, len(gws))
	for i, gw := range gws {
		routes[i] = store.Route{Dst: netip.PrefixFrom(gw, 0).Masked(), GW: gw}
	}
	return gws, routes
}

// gateways returns the virtual gateways of the families of pod, IPv4 first.
func gateways(pod []netip.Prefix) []netip.Addr {
	var v4, v6 bool
	for _, p := range pod {
		v4, v6 = v4 || p.Addr().Is4(), v6 || p.Addr().Is6()
	}
	var out []netip.Addr
	if v4 {
		out = append(out, netip.MustParseAddr(VirtualGW4))
	}
	if v6 {
		out = append(out, netip.MustParseAddr(VirtualGW6))
	}
	return out
}

// hostSide sets up the host end: proxy ARP, no router advertisements taken,
// and a route to each pod address (`ip route add IP dev HOSTVETH`, proto
// static, as Azure's netlink calls leave it).
func hostSide(host *netops.Handle, hostName string, pod []netip.Prefix) error {
	if err := host.SetSysctl("net/ipv4/conf/"+hostName+"/proxy_arp", "1"); err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "proxy ARP on %s: %w", hostName, err)
	}
	if err := host.SetSysctl("net/ipv6/conf/"+hostName+"/accept_ra", "0"); err != nil && !errors.Is(err, netops.ErrNotFound) {
		return cniplug.Errorf(types.ErrIOFailure, "accept_ra on %s: %w", hostName, err)
	}
	for _, p := range pod {
		ip := p.Addr()
		if err := host.EnsureStaticRoute(netops.Route{Dst: netip.PrefixFrom(ip, ip.BitLen()), Dev: hostName}); err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "route pod address %s to %s: %w", ip, hostName, err)
		}
	}
	return nil
}

// podSide sets up the pod's interface as Azure does: the addresses, whose
// subnet routes the kernel adds are removed again; per family, the
// virtual gateway as a link route, the default route through it and a
// neighbour entry for it with the host end's MAC (in state PROBE for IPv4,
// permanent for IPv6, as Azure sets them).
func podSide(pod *netops.Handle, ifname string, addrs []netip.Prefix) error {
	if err := pod.SetSysctl("net/ipv6/conf/"+ifname+"/accept_ra", "0"); err != nil && !errors.Is(err, netops.ErrNotFound) {
		return cniplug.Errorf(types.ErrIOFailure, "accept_ra on %s in the pod: %w", ifname, err)
	}
	if err := attach.EnsurePodAddrs(pod, ifname, addrs, netops.AddrOpts{NoDAD: true}); err != nil {
		return err
	}
	for _, p := range addrs {
		if p.Bits() < p.Addr().BitLen() {
			if err := pod.DeleteRoute(netops.Route{Dst: p.Masked(), Dev: ifname}); err != nil {
				return cniplug.Errorf(types.ErrIOFailure, "remove the subnet route %s from %s in the pod: %w", p.Masked(), ifname, err)
			}
		}
	}
	for _, gw := range gateways(addrs) {
		steps := []func() error{
			func() error {
				return pod.EnsureStaticRoute(netops.Route{Dst: netip.PrefixFrom(gw, gw.BitLen()), Dev: ifname, ScopeLink: true})
			},
			func() error {
				return pod.EnsureStaticRoute(netops.Route{Dst: netip.PrefixFrom(gw, 0).Masked(), GW: gw, Dev: ifname})
			},
			func() error {
				if gw.Is4() {
					return pod.EnsureNeighProbe(ifname, gw, HostVethMAC)
				}
				return pod.EnsureNeigh(ifname, gw, HostVethMAC)
			},
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return cniplug.Errorf(types.ErrIOFailure, "virtual gateway %s in the pod: %w", gw, err)
			}
		}
	}
	return nil
}

// nicMTU returns the MTU of the node's NIC: master, else the interface with
// an address in the subnet of the pod's first address (Azure's way of
// finding it), else code 7 naming "master".
func nicMTU(host *netops.Handle, master string, pod []netip.Prefix) (int, error) {
	if master != "" {
		l, err := host.LinkByName(master)
		if err != nil {
			return 0, cniplug.Errorf(types.ErrInvalidNetworkConfig, "config field \"master\": %q: %v: name the node's NIC", master, err)
		}
		return l.MTU, nil
	}
	links, err := host.Links()
	if err != nil {
		return 0, cniplug.WithCode(types.ErrIOFailure, err)
	}
	subnet := pod[0].Masked()
	for _, l := range links {
		if l.Name != "lo" && !attach.IsVethName(VethPrefix, l.Name) && hasAddrIn(host, l.Name, subnet) {
			return l.MTU, nil
		}
	}
	return 0, cniplug.Errorf(types.ErrInvalidNetworkConfig, "azure-vnet: no interface of the node has an address in %s (the subnet of the pod's address): set \"master\" to the node's NIC, or \"mtu\"", subnet)
}
