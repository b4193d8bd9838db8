package azurevnet

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"slices"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/roles/internal/attach"
)

// attachFabric (bridge mode) puts the NIC on the bridge (once) and the pod's IPv4 and IPv6
// addresses into the fabric rules. The NIC is found by the pod's first IPv4
// subnet, or its first IPv6 one when it has no IPv4 address.
func attachFabric(_ context.Context, at *bridge.Attachment) (func(), error) {
	var ips []netip.Addr
	var subnet netip.Prefix
	for _, ipc := range at.Result.IPs {
		p := attach.PrefixOf(ipc.Address)
		if !p.IsValid() {
			continue
		}
		ips = append(ips, p.Addr())
		if !subnet.IsValid() || subnet.Addr().Is6() && p.Addr().Is4() {
			subnet = p.Masked()
		}
	}
	if len(ips) == 0 {
		return nil, nil // no address: nothing for the fabric rules
	}
	z, err := fields(at.Args)
	if err != nil {
		return nil, err
	}
	// After the first pod, the NIC is known from the fabric rules: no walk
	// over the node's interfaces.
	known, err := at.Host.NFT().FabricUplinks()
	if err != nil {
		return nil, cniplug.Errorf(types.ErrIOFailure, "azure-vnet: %w", err)
	}
	master := z.Master
	if master == "" {
		master = knownPort(at.Host, known, at.Bridge)
	}
	if master == "" {
		if master, err = findMaster(at.Host, at.Conf, at.Bridge, subnet); err != nil {
			return nil, err
		}
	}
	up, err := at.Host.EnsureUplink(netops.UplinkOpts{Uplink: master, Bridge: at.Conf.Bridge})
	if err != nil {
		return nil, cniplug.Errorf(types.ErrIOFailure, "azure-vnet: %w", err)
	}
	if !bytes.Equal(known[master], up.MAC) {
		if err := at.Host.NFT().EnsureFabricUplink(master, up.MAC); err != nil {
			return nil, cniplug.Errorf(types.ErrIOFailure, "azure-vnet: %w", err)
		}
	}
	if err := at.Host.NFT().EnsureFabricPods(ips, at.PodVeth.MAC); err != nil {
		return nil, cniplug.Errorf(types.ErrIOFailure, "azure-vnet: %w", err)
	}
	if err := ensureViaHost(at.Host, z.IPsToRouteViaHost, up.MAC); err != nil {
		_ = at.Host.NFT().DeleteFabricPods(ips)
		return nil, err
	}
	host := at.Host
	return func() { _ = host.NFT().DeleteFabricPods(ips) }, nil
}

// knownPort returns the NIC of the fabric rules that is a port of br, or "".
func knownPort(host *netops.Handle, known map[string]net.HardwareAddr, br netops.Link) string {
	for name := range known {
		if l, err := host.LinkByName(name); err == nil && l.MasterIndex == br.Index {
			return name
		}
	}
	return ""
}

// findMaster returns the node's NIC for subnet: the interface with an address
// in it, or, once that moved, the bridge's port that is not a pod veth.
//
// It looks twice before it gives up: another ADD may be moving the NIC onto
// the bridge between this one's link dump and its address reads. A NIC's
// address leaves it only after the NIC became the bridge's port
// (EnsureUplink's order), so a second look finds that port.
func findMaster(host *netops.Handle, c *bridge.Conf, br netops.Link, subnet netip.Prefix) (string, error) {
	for range 2 {
		name, err := scanForMaster(host, c, br, subnet)
		if err != nil || name != "" {
			return name, err
		}
	}
	return "", cniplug.Errorf(types.ErrInvalidNetworkConfig, "azure-vnet: no interface of the node has an address in %s (the subnet of the pod's address) and bridge %q has no NIC with one yet: set \"master\" to the node's NIC", subnet, c.Bridge)
}

// scanForMaster is one look of findMaster ("" if it found no NIC).
func scanForMaster(host *netops.Handle, c *bridge.Conf, br netops.Link, subnet netip.Prefix) (string, error) {
	links, err := host.Links()
	if err != nil {
		return "", cniplug.WithCode(types.ErrIOFailure, err)
	}
	var port string
	for _, l := range links {
		if l.Index == br.Index || l.Name == "lo" || c.IsHostVeth(l.Name) || bridge.IsHostVeth(l.Name) || l.Kind == "bridge" {
			continue
		}
		if l.MasterIndex == br.Index && port == "" {
			port = l.Name
		}
		if l.MasterIndex != 0 {
			continue
		}
		if hasAddrIn(host, l.Name, subnet) {
			return l.Name, nil
		}
	}
	if port != "" {
		// The NIC is already enslaved: its addresses are on the bridge, or
		// another ADD is moving them right now (EnsureUplink finishes that
		// idempotently).
		return port, nil
	}
	return "", nil
}

// hasAddrIn reports whether link name has an address in subnet (false when
// it is gone meanwhile).
func hasAddrIn(host *netops.Handle, name string, subnet netip.Prefix) bool {
	addrs, err := host.Addrs(name)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(addrs, func(p netip.Prefix) bool { return p.Masked() == subnet })
}

// ensureViaHost makes the bridge hand the pods' IPv4 frames to addrs
// (ipsToRouteViaHost, node-local DNS) to the node's stack, by the bridge's
// MAC, as Azure's broute rules do. Node-wide, like the NIC on the bridge:
// no DEL removes it.
func ensureViaHost(host *netops.Handle, addrs []string, bridgeMAC net.HardwareAddr) error {
	if len(addrs) == 0 {
		return nil
	}
	ips := make([]netip.Addr, len(addrs))
	for i, s := range addrs {
		ips[i] = netip.MustParseAddr(s) // checked by fields
	}
	if err := host.NFT().EnsureViaHost(ips, bridgeMAC); err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "azure-vnet ipsToRouteViaHost: %w", err)
	}
	return nil
}
