package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/store"
)

// AzureBridge is azure-vnet's bridge when the config names none.
const AzureBridge = "azure0"

// AzureRole is azure-vnet, a drop-in for Azure CNI in bridge mode: the
// bridge plugin with bridge azure0 and host veths azv<hash>, plus the node's
// NIC (found by the pod subnet, or "master") enslaved to the bridge with its
// addresses and routes, and nftables rules that make the fabric see only the
// NIC's MAC, as Azure's ebtables rules do.
var AzureRole = NewWithHooks("azure-vnet",
	"azure-vnet connects pods to the VNet like Azure CNI in bridge mode (\"mode\": \"bridge\"): a veth pair per pod on bridge "+
		"\"bridge\" (default azure0), addresses from the ipam section (azure-vnet-ipam hands out the NIC's secondary IPs). "+
		"The node's NIC (the interface with an address in the pod's subnet, or \"master\") is enslaved to the bridge once, "+
		"its addresses and routes moved to the bridge; nftables bridge rules rewrite MACs so the fabric only sees the NIC's.",
	Conf{Bridge: AzureBridge},
	&Hooks{VethPrefix: "azv", Parse: azureParse, Attach: azureAttach, Detach: azureDetach, GC: azureGC})

// azureConf is azure-vnet's own part of the config.
type azureConf struct {
	Mode   string `json:"mode"`
	Master string `json:"master"`
}

func azureFields(a *cniplug.Args) (azureConf, error) {
	var z azureConf
	if err := json.Unmarshal(a.StdinData, &z); err != nil {
		return z, cniplug.Errorf(types.ErrDecodingFailure, "azure-vnet config: %v", err)
	}
	return z, nil
}

// azureParse accepts bridge mode only. The gateway lives in the fabric, so
// isGateway and isDefaultGateway are ignored (the default route comes from
// IPAM).
func azureParse(a *cniplug.Args, c *Conf) error {
	z, err := azureFields(a)
	if err != nil {
		return err
	}
	if m := strings.ToLower(z.Mode); m != "" && m != "bridge" {
		return cniplug.Errorf(types.ErrUnsupportedField, "config field \"mode\": %q is not supported by cnibox's azure-vnet, which only does \"bridge\" mode: set \"mode\": \"bridge\"", z.Mode)
	}
	if z.Master != "" {
		if err := checkName("master", z.Master); err != nil {
			return err
		}
	}
	c.IsGateway, c.IsDefaultGW = false, false
	return nil
}

func checkName(field, name string) error {
	if len(name) > 15 || strings.ContainsAny(name, "/: \t\n") {
		return cniplug.ConfError(field, "%q is not a valid interface name", name)
	}
	return nil
}

// azureAttach puts the NIC on the bridge (once) and the pod's IPv4 and IPv6
// addresses into the fabric rules. The NIC is found by the pod's first IPv4
// subnet, or its first IPv6 one when it has no IPv4 address.
func azureAttach(_ context.Context, at *Attachment) (func(), error) {
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
	z, err := azureFields(at.Args)
	if err != nil {
		return nil, err
	}
	// After the first pod, the NIC is known from the fabric rules: no walk
	// over the node's interfaces.
	known, err := at.Host.FabricUplinks()
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
		if err := at.Host.EnsureFabricUplink(master, up.MAC); err != nil {
			return nil, cniplug.Errorf(types.ErrIOFailure, "azure-vnet: %w", err)
		}
	}
	if err := at.Host.EnsureFabricPods(ips, at.PodVeth.MAC); err != nil {
		return nil, cniplug.Errorf(types.ErrIOFailure, "azure-vnet: %w", err)
	}
	host := at.Host
	return func() { _ = host.DeleteFabricPods(ips) }, nil
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
func findMaster(host *netops.Handle, c *Conf, br netops.Link, subnet netip.Prefix) (string, error) {
	for range 2 {
		name, err := scanForMaster(host, c, br, subnet)
		if err != nil || name != "" {
			return name, err
		}
	}
	return "", cniplug.Errorf(types.ErrInvalidNetworkConfig, "azure-vnet: no interface of the node has an address in %s (the subnet of the pod's address) and bridge %q has no NIC with one yet: set \"master\" to the node's NIC", subnet, c.Bridge)
}

// scanForMaster is one look of findMaster ("" if it found no NIC).
func scanForMaster(host *netops.Handle, c *Conf, br netops.Link, subnet netip.Prefix) (string, error) {
	links, err := host.Links()
	if err != nil {
		return "", cniplug.WithCode(types.ErrIOFailure, err)
	}
	var port string
	for _, l := range links {
		if l.Index == br.Index || l.Name == "lo" || c.IsHostVeth(l.Name) || isOurVeth(l.Name) || l.Kind == "bridge" {
			continue
		}
		if l.MasterIndex == br.Index && port == "" {
			port = l.Name
		}
		if l.MasterIndex != 0 {
			continue
		}
		addrs, err := host.Addrs(l.Name)
		if err != nil {
			continue // gone meanwhile
		}
		for _, p := range addrs {
			if p.Masked() == subnet {
				return l.Name, nil
			}
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

// azureDetach removes the pod's addresses from the fabric rules.
func azureDetach(_ context.Context, _ *cniplug.Args, _ *Conf, host *netops.Handle, ips []netip.Addr) error {
	if err := host.DeleteFabricPods(ips); err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "azure-vnet: %w", err)
	}
	return nil
}

// azureGC removes fabric entries of pods that are not kept: those of stale
// records, and any other in the network's subnets that no kept record has.
func azureGC(_ context.Context, a *cniplug.Args, _ *Conf, host *netops.Handle, eps []store.Endpoint) error {
	keep := map[netip.Addr]bool{}
	var subnets []netip.Prefix
	for _, ep := range eps {
		kept := a.Conf.Keeps(ep.ContainerID, ep.IfName)
		for _, p := range ep.IPs {
			subnets = append(subnets, p.Masked())
			if kept {
				keep[p.Addr()] = true
			}
		}
	}
	have, err := host.FabricPods()
	if err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	var drop []netip.Addr
	for ip := range have {
		if keep[ip] {
			continue
		}
		for _, s := range subnets {
			if s.Contains(ip) {
				drop = append(drop, ip)
				break
			}
		}
	}
	if len(drop) == 0 {
		return nil
	}
	if err := host.DeleteFabricPods(drop); err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "azure-vnet GC: %w", err)
	}
	return nil
}
