package bridge

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/fault"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/store"
)

func add(ctx context.Context, a *cniplug.Args, defaults Conf) (_ types.Result, err error) {
	c, err := parseConf(a, defaults)
	if err != nil {
		return nil, err
	}
	mac, err := a.RequestedMAC()
	if err != nil {
		return nil, err
	}
	pod, err := netops.Open(a.Netns)
	if err != nil {
		return nil, cniplug.Errorf(types.ErrUnknownContainer, "open CNI_NETNS %q: %w", a.Netns, err)
	}
	defer pod.Close()
	if l, err := pod.LinkByName(a.IfName); err == nil && !removeLeftover(pod, l, c.hostVethName(a.ContainerID, a.IfName)) {
		return nil, cniplug.Errorf(cniplug.CodeIfaceExists, "interface %q already exists in the pod namespace %s: pick another CNI_IFNAME or DEL the attachment that made it", a.IfName, a.Netns)
	}

	var undo cniplug.Undo
	defer undo.Finish(&err)

	// The address reservation and the endpoint record first, in one store
	// transaction, before any kernel work: an exhausted pool fails before
	// anything is made, and a call killed later leaves a record that DEL and
	// GC find.
	hostName := c.hostVethName(a.ContainerID, a.IfName)
	if mac == nil {
		// cnibox picks it so that the endpoint record can hold it before
		// the veth exists.
		mac = netops.RandomMAC()
	}
	res := &current.Result{CNIVersion: current.ImplementedSpecVersion}
	plan, err := reserve(ctx, a, c, res, hostName, mac)
	if err != nil {
		return nil, err
	}
	undo.Push(func() { _ = release(context.WithoutCancel(ctx), a, c, nil) })
	fault.Point("bridge/add/after-ipam")

	host, err := netops.Open("")
	if err != nil {
		return nil, cniplug.WithCode(types.ErrIOFailure, err)
	}
	defer host.Close()

	br, err := host.EnsureBridge(netops.BridgeOpts{Name: c.Bridge, MTU: c.MTU, MAC: bridgeMAC(c.Bridge), PromiscMode: c.PromiscMode, VlanFiltering: c.Vlan != 0 || len(c.vlans) > 0})
	if err != nil {
		return nil, cniplug.Errorf(types.ErrIOFailure, "bridge %q: %w", c.Bridge, err)
	}
	fault.Point("bridge/add/after-bridge")
	hv, pv, err := host.EnsureVeth(netops.VethOpts{
		HostName: hostName, PeerName: a.IfName, Peer: pod, MTU: c.MTU, PeerMAC: mac, Master: c.Bridge,
	})
	if errors.Is(err, netops.ErrExists) {
		return nil, cniplug.Errorf(cniplug.CodeIfaceExists, "create veth %s/%s: %w", hostName, a.IfName, err)
	}
	if err != nil {
		return nil, cniplug.Errorf(types.ErrIOFailure, "create veth %s/%s: %w", hostName, a.IfName, err)
	}
	undo.Push(func() { _ = host.DeleteLink(hostName) })
	fault.Point("bridge/add/after-veth")
	if c.HairpinMode {
		if err := host.SetHairpin(hostName, true); err != nil {
			return nil, cniplug.WithCode(types.ErrIOFailure, err)
		}
	}
	if c.Vlan != 0 || len(c.vlans) > 0 {
		if err := host.SetPortVlans(hostName, netops.PortVlanOpts{Access: c.Vlan, Trunk: c.vlans, PreserveDefault: c.PreserveDefaultVlan}); err != nil {
			return nil, cniplug.WithCode(types.ErrIOFailure, err)
		}
	}
	if c.MacSpoofChk {
		if err := host.EnsureMacSpoofCheck(hostName, pv.MAC); err != nil {
			return nil, cniplug.WithCode(types.ErrIOFailure, err)
		}
		undo.Push(func() { _ = host.DeleteMacSpoofCheck(hostName) })
		fault.Point("bridge/add/after-macspoof")
	}

	a.Mark("veth")

	res.Interfaces = []*current.Interface{
		{Name: br.Name, Mac: br.MAC.String()},
		{Name: hv.Name, Mac: hv.MAC.String()},
		{Name: pv.Name, Mac: pv.MAC.String(), Sandbox: a.Netns},
	}
	if plan != nil {
		if err := applyAddresses(host, pod, a, c, plan); err != nil {
			return nil, err
		}
		fault.Point("bridge/add/after-addresses")
		if c.IPMasq {
			if err := host.EnsureMasq(a.Conf.Name, podPrefixes(res)); err != nil {
				return nil, cniplug.Errorf(types.ErrIOFailure, "ipMasq: %w", err)
			}
			ips := podAddrs(res)
			undo.Push(func() { _ = host.DeleteMasq(ips) })
			fault.Point("bridge/add/after-masq")
		}
		a.Mark("addresses")
	}

	if err := c.attachHook(ctx, &undo, &Attachment{Args: a, Conf: c, Host: host, Pod: pod, Bridge: br, HostVeth: hv, PodVeth: pv, Result: res}); err != nil {
		return nil, err
	}
	undo.Discard()
	return res, nil
}

// reserve runs the IPAM plugin and records the endpoint (with the addresses,
// routes and DNS that res gets from IPAM) in the store. When IPAM is one of
// cnibox's roles it runs in process inside the same store transaction as the
// record (one open, one commit); a foreign IPAM plugin runs first, without
// the store's lock. It returns what applyAddresses puts in the kernel (nil
// without IPAM).
func reserve(ctx context.Context, a *cniplug.Args, c *Conf, res *current.Result, hostName string, mac net.HardwareAddr) (*addrPlan, error) {
	t := a.Conf.IPAM.Type
	var plan *addrPlan
	ipam := func() error {
		if t == "" {
			return nil
		}
		r, err := a.DelegateAdd(ctx, t, a.StdinData)
		if err != nil {
			return err
		}
		ipamRes, err := current.NewResultFromResult(r)
		if err != nil {
			return cniplug.Errorf(types.ErrDecodingFailure, "IPAM plugin %q result: %w", t, err)
		}
		if len(ipamRes.IPs) == 0 {
			return cniplug.Errorf(types.ErrInvalidNetworkConfig, "IPAM plugin %q returned no address: check the ipam section", t)
		}
		plan = planAddresses(a, c, ipamRes, res)
		a.Mark("ipam")
		return nil
	}
	inProcess := t == "" // in process and inside our store transaction
	if r, ok := a.Registry.Lookup(t); ok && r.JoinsCallerStore {
		inProcess = true
	}
	if !inProcess {
		if err := ipam(); err != nil {
			return nil, err
		}
	}
	st, err := openStore(a, c)
	if err != nil {
		if !inProcess {
			_ = a.DelegateDel(context.WithoutCancel(ctx), t, a.StdinData)
		}
		return nil, err
	}
	defer st.Close()
	key := store.SharedKey(st.Dir())
	a.SetShared(key, st)
	defer a.SetShared(key, nil)
	var ipamErr error
	err = st.Batch(func() error {
		if inProcess {
			if ipamErr = ipam(); ipamErr != nil {
				return ipamErr
			}
		}
		return st.PutEndpoint(endpointOf(a, c, res, hostName, mac))
	})
	if err != nil {
		if !inProcess {
			_ = a.DelegateDel(context.WithoutCancel(ctx), t, a.StdinData)
		}
		if ipamErr != nil {
			return nil, ipamErr
		}
		return nil, err
	}
	a.Mark("record")
	return plan, nil
}

// addrPlan is what applyAddresses puts in the kernel: the pod's addresses
// and routes and, with isGateway, the gateways on the bridge.
type addrPlan struct {
	addrs    []netip.Prefix
	gateways []netip.Prefix // for the bridge (isGateway)
	routes   []netops.Route
	gws      map[bool]netip.Addr // by is4
}

// planAddresses works out from IPAM's result what the pod gets, and fills
// res's IPs, routes and DNS with it.
func planAddresses(a *cniplug.Args, c *Conf, ipamRes, res *current.Result) *addrPlan {
	podIdx := 2
	p := &addrPlan{gws: map[bool]netip.Addr{}}
	for _, ipc := range ipamRes.IPs {
		pfx := prefixOf(ipc.Address)
		p.addrs = append(p.addrs, pfx)
		gw := addrOf(ipc.Gateway)
		if gw.IsValid() {
			if _, seen := p.gws[gw.Is4()]; !seen {
				p.gws[gw.Is4()] = gw
			}
			if c.IsGateway {
				p.gateways = append(p.gateways, netip.PrefixFrom(gw, pfx.Bits()))
			}
		}
		res.IPs = append(res.IPs, &current.IPConfig{Interface: &podIdx, Address: ipc.Address, Gateway: ipc.Gateway})
	}
	routes := append([]*types.Route(nil), ipamRes.Routes...)
	if c.IsDefaultGW {
		for _, is4 := range []bool{true, false} {
			gw, ok := p.gws[is4]
			if !ok {
				continue
			}
			dst := netip.MustParsePrefix("::/0")
			if is4 {
				dst = netip.MustParsePrefix("0.0.0.0/0")
			}
			if !hasRoute(routes, dst) {
				routes = append(routes, &types.Route{Dst: ipNet(dst), GW: gw.AsSlice()})
			}
		}
	}
	for _, r := range routes {
		dst := prefixOf(r.Dst)
		gw := addrOf(r.GW)
		if !gw.IsValid() {
			gw = p.gws[dst.Addr().Is4()]
		}
		p.routes = append(p.routes, netops.Route{Dst: dst, GW: gw, Dev: a.IfName, MTU: r.MTU, Priority: r.Priority, Table: intOr(r.Table)})
		out := &types.Route{Dst: r.Dst, MTU: r.MTU, Priority: r.Priority, Table: r.Table, Scope: r.Scope, AdvMSS: r.AdvMSS}
		if gw.IsValid() {
			out.GW = gw.AsSlice()
		}
		res.Routes = append(res.Routes, out)
	}
	res.DNS = ipamRes.DNS
	return p
}

// applyAddresses puts the plan's addresses and routes on the pod interface
// and, with isGateway, the gateways on the bridge.
func applyAddresses(host, pod *netops.Handle, a *cniplug.Args, c *Conf, p *addrPlan) error {
	for _, pfx := range p.addrs {
		if err := pod.EnsureAddr(a.IfName, pfx, netops.AddrOpts{NoDAD: !c.EnableDad}); err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "add address %s to %s in the pod: %w", pfx, a.IfName, err)
		}
	}
	gwLink := c.Bridge
	if c.Vlan != 0 && len(p.gateways) > 0 {
		// The gateway of a VLAN lives on "<bridge>.<vid>", in that VLAN.
		l, err := host.EnsureBridgeVlanLink(c.Bridge, c.Vlan)
		if err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "vlan %d gateway: %w", c.Vlan, err)
		}
		gwLink = l
	}
	for _, gw := range p.gateways {
		if err := ensureGatewayAddr(host, c, gwLink, gw); err != nil {
			return err
		}
	}
	for _, rt := range p.routes {
		if err := pod.EnsureRoute(rt); err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "add route %s via %s in the pod: %w", rt.Dst, rt.GW, err)
		}
	}
	if c.IsGateway {
		if err := enableForwarding(host, p.gws); err != nil {
			return err
		}
	}
	return nil
}

func intOr(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

func hasRoute(routes []*types.Route, dst netip.Prefix) bool {
	for _, r := range routes {
		if prefixOf(r.Dst) == dst {
			return true
		}
	}
	return false
}

// ensureGatewayAddr puts gw on link (the bridge, or its VLAN interface).
// Another address of the same subnet there is an error unless forceAddress,
// which replaces it.
func ensureGatewayAddr(host *netops.Handle, c *Conf, link string, gw netip.Prefix) error {
	have, err := host.Addrs(link)
	if err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "list addresses of %q: %w", link, err)
	}
	for _, p := range have {
		if p == gw {
			return nil
		}
		if p.Addr().Is4() != gw.Addr().Is4() || !p.Overlaps(gw) || p.Addr().IsLinkLocalUnicast() {
			continue
		}
		if !c.ForceAddress {
			return cniplug.Errorf(types.ErrInvalidNetworkConfig, "%q already has address %s, not the gateway %s: set \"forceAddress\": true to replace it, or fix the ipam gateway", link, p, gw)
		}
		if err := host.DeleteAddr(link, p); err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "remove old gateway %s from %q: %w", p, link, err)
		}
	}
	if err := host.EnsureAddr(link, gw, netops.AddrOpts{NoDAD: true}); err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "add gateway %s to %q: %w", gw, link, err)
	}
	return nil
}

// enableForwarding turns on IP forwarding for the families that have a
// gateway; a value already set is not written again.
func enableForwarding(host *netops.Handle, gws map[bool]netip.Addr) error {
	for is4 := range gws {
		key := "net.ipv6.conf.all.forwarding"
		if is4 {
			key = "net.ipv4.ip_forward"
		}
		if v, err := host.Sysctl(key); err == nil && v == "1" {
			continue
		}
		if err := host.SetSysctl(key, "1"); err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "enable forwarding (%s): %w", key, err)
		}
	}
	return nil
}

func podPrefixes(res *current.Result) []netip.Prefix {
	var out []netip.Prefix
	for _, ipc := range res.IPs {
		out = append(out, prefixOf(ipc.Address))
	}
	return out
}

func podAddrs(res *current.Result) []netip.Addr {
	var out []netip.Addr
	for _, p := range podPrefixes(res) {
		out = append(out, p.Addr())
	}
	return out
}

// endpointOf is the store record of the attachment that res describes.
func endpointOf(a *cniplug.Args, c *Conf, res *current.Result, hostName string, mac net.HardwareAddr) store.Endpoint {
	ep := store.Endpoint{
		Network: a.Conf.Name, ContainerID: a.ContainerID, IfName: a.IfName, Netns: a.Netns,
		PodNamespace: string(a.CNIArgs.K8S_POD_NAMESPACE), PodName: string(a.CNIArgs.K8S_POD_NAME),
		PodUID: string(a.CNIArgs.K8S_POD_UID), Plugin: a.Conf.Type, Bridge: c.Bridge, HostVeth: hostName,
		MAC: mac.String(), IPs: podPrefixes(res), Created: time.Now().UTC(), BootID: store.BootID(),
	}
	for _, ipc := range res.IPs {
		if gw := addrOf(ipc.Gateway); gw.IsValid() {
			ep.Gateways = append(ep.Gateways, gw)
		}
	}
	for _, r := range res.Routes {
		ep.Routes = append(ep.Routes, store.Route{Dst: prefixOf(r.Dst), GW: addrOf(r.GW)})
	}
	ep.DNS = store.DNS{Nameservers: res.DNS.Nameservers, Domain: res.DNS.Domain, Search: res.DNS.Search, Options: res.DNS.Options}
	if c.IPMasq {
		ep.Extra = map[string]string{"ipMasq": "true"}
	}
	return ep
}

// openStore opens the endpoint store named by the config's dataDir or the
// call's environment (an in-process delegate's environment is not the
// process's).
func openStore(a *cniplug.Args, c *Conf) (*store.Store, error) {
	return store.OpenWith(store.DirFrom(c.DataDir, a.Getenv), store.Options{Getenv: a.Getenv})
}
