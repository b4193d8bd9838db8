package azurevnet

import (
	"bytes"
	"context"
	"net/netip"
	"slices"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/roles/internal/attach"
)

// delTransparent removes the host end's source address check, frees the
// addresses (IPAM and the endpoint record), then deletes the veth pair; the
// node's routes to the pod go with its host end. Azure leaves the veth to
// the pod's namespace's end; cnibox deletes it, so a DEL with the namespace
// still there leaves nothing behind either.
func delTransparent(ctx context.Context, a *cniplug.Args, c *tconf, host *netops.Handle) error {
	hostName := HostVethName(a.ContainerID, a.IfName)
	unhook := func(ips []netip.Addr) error { return uncheckSource(host, c, hostName, ips) }
	return attach.DelVeth(ctx, a, c.DataDir, host, hostName, unhook)
}

// gcTransparent removes the host veths of the attachments GC does not
// keep (with the node's routes to them), the source address checks of
// host ends that are gone, the fabric elements of those made in bridge
// mode before the config changed mode, their records, and runs the IPAM
// plugin's GC.
func gcTransparent(ctx context.Context, a *cniplug.Args, c *tconf, host *netops.Handle) error {
	_, stale, err := attach.Endpoints(a, c.DataDir)
	if err != nil {
		return err
	}
	if err := attach.DeleteStaleVeths(host, stale); err != nil {
		return err
	}
	if err := gcSourceChecks(host, a, nft.SrcCheckRouted, nft.SrcCheckBridge); err != nil {
		return err
	}
	var fabric []netip.Addr
	for _, ep := range stale {
		if ep.Bridge != "" {
			for _, p := range ep.IPs {
				fabric = append(fabric, p.Addr())
			}
		}
	}
	if len(fabric) > 0 {
		if err := host.NFT().DeleteFabricPods(fabric); err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "azure-vnet GC: %w", err)
		}
	}
	return attach.FinishGC(ctx, a, c.DataDir, stale)
}

// checkTransparent verifies a transparent attachment against prevResult:
// the pod's veth and addresses, the virtual gateway's link route, default
// route and neighbour entry in the pod; on the node the host end up with
// proxy ARP, a route to each pod address and its source address check.
func checkTransparent(ctx context.Context, a *cniplug.Args, c *tconf) error {
	hostName := HostVethName(a.ContainerID, a.IfName)
	return attach.Check(ctx, a, attach.CheckOpts{Prev: attach.Prev, Kind: "veth",
		Pod: func(pod *netops.Handle, prev *current.Result) error {
			return checkPodGateways(pod, a.IfName, prefixes(prev))
		},
		Node: attach.NodeCheck(a, nft.SrcCheckRouted, hostName, attach.SpoofCheckOn(c.IPSpoofChk),
			func(host *netops.Handle, prev *current.Result) error {
				return attach.CheckRoutedEnd(host, hostName, prev, func() error { return checkProxyARP(host, hostName) })
			}),
	})
}

// prefixes are the addresses of prevResult.
func prefixes(prev *current.Result) []netip.Prefix {
	var addrs []netip.Prefix
	for _, ipc := range prev.IPs {
		addrs = append(addrs, attach.PrefixOf(ipc.Address))
	}
	return addrs
}

// checkPodGateways: per family of addrs, the pod routes the virtual gateway
// out of ifname, its default route goes through it, and it resolves to the
// host end's MAC.
func checkPodGateways(pod *netops.Handle, ifname string, addrs []netip.Prefix) error {
	routes, err := pod.Routes(ifname)
	if err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	neighs, err := pod.Neighs(ifname)
	if err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	for _, gw := range gateways(addrs) {
		if !slices.ContainsFunc(routes, func(r netops.Route) bool { return r.Dst == netip.PrefixFrom(gw, gw.BitLen()) && !r.GW.IsValid() }) {
			return cniplug.Errorf(types.ErrIOFailure, "the pod has no route %s dev %s to its virtual gateway", gw, ifname)
		}
		if !slices.ContainsFunc(routes, func(r netops.Route) bool { return r.Dst.Bits() == 0 && r.GW == gw }) {
			return cniplug.Errorf(types.ErrIOFailure, "the pod's default route does not go via the virtual gateway %s", gw)
		}
		if !slices.ContainsFunc(neighs, func(n netops.Neigh) bool { return n.IP == gw && bytes.Equal(n.MAC, HostVethMAC) }) {
			return cniplug.Errorf(types.ErrIOFailure, "the pod has no neighbour entry %s lladdr %s on %s", gw, HostVethMAC, ifname)
		}
	}
	return nil
}

// checkProxyARP: the host end answers ARP by proxy.
func checkProxyARP(host *netops.Handle, hostName string) error {
	if v, err := host.Sysctl("net/ipv4/conf/" + hostName + "/proxy_arp"); err != nil || v != "1" {
		return cniplug.Errorf(types.ErrIOFailure, "proxy ARP is off on the host end %q (%q, %v): the pod cannot resolve its gateway", hostName, v, err)
	}
	return nil
}
