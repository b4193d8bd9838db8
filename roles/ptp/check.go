package ptp

import (
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

// check verifies the attachment against prevResult: the pod's veth, its
// addresses and routes, the host end up with the gateways and the node's
// routes to the pod, its source address check (ipspoofchk) and the
// masquerade entries.
func check(ctx context.Context, a *cniplug.Args, c *Conf) error {
	hostName := attach.HostVethName(a.ContainerID, a.IfName)
	node := attach.NodeCheck(a, nft.SrcCheckRouted, hostName, attach.SpoofCheckOn(c.IPSpoofChk),
		func(host *netops.Handle, prev *current.Result) error {
			return attach.CheckRoutedEnd(host, hostName, prev, func() error { return checkGateways(host, hostName, prev) })
		})
	return attach.Check(ctx, a, attach.CheckOpts{Prev: attach.Prev, Kind: "veth", Node: node, IPMasq: c.IPMasq})
}

// checkGateways verifies that each gateway of prevResult is an address of
// the host end.
func checkGateways(host *netops.Handle, hostName string, prev *current.Result) error {
	addrs, err := host.Addrs(hostName)
	if err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	for _, ipc := range prev.IPs {
		bits := attach.PrefixOf(ipc.Address).Addr().BitLen()
		if gw := attach.AddrOf(ipc.Gateway); gw.IsValid() && !slices.Contains(addrs, netip.PrefixFrom(gw, bits)) {
			return cniplug.Errorf(types.ErrIOFailure, "gateway %s is missing on the host end %q (has %v)", gw, hostName, addrs)
		}
	}
	return nil
}
