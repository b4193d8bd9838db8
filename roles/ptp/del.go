package ptp

import (
	"context"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/attach"
)

// del removes the attachment: masquerade entries, the addresses (IPAM and
// the endpoint record), then the veth pair, whose routes and gateway
// addresses go with it. Everything already gone counts as removed, and it
// works with the pod's namespace gone: the host veth's name is derived from
// the container ID and ifname.
func del(ctx context.Context, a *cniplug.Args, c *Conf, host *netops.Handle) error {
	err := attach.Release(ctx, a, c.DataDir, func(ips []netip.Addr) error {
		if err := attach.PolicyUnpend(host, ips); err != nil {
			return err
		}
		if !c.IPMasq || len(ips) == 0 {
			return nil
		}
		if err := host.NFT().DeleteMasq(ips); err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "remove masquerade entries %v: %w", ips, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	a.Mark("release")
	if err := attach.DeleteVeth(host, attach.HostVethName(a.ContainerID, a.IfName), a); err != nil {
		return err
	}
	a.Mark("veth")
	return nil
}

// gc removes what belongs to attachments of this network that are not in
// the valid list: their host veths (named in their endpoint records),
// masquerade entries of the network's addresses that no kept attachment
// holds, and the records; then GC of the IPAM plugin frees the addresses.
func gc(ctx context.Context, a *cniplug.Args, c *Conf, host *netops.Handle) error {
	kept, stale, err := attach.Endpoints(a, c.DataDir)
	if err != nil {
		return err
	}
	keepIP := map[netip.Addr]bool{}
	for _, ep := range kept {
		for _, p := range ep.IPs {
			keepIP[p.Addr()] = true
		}
	}
	if err := attach.GCMasq(host, a.Conf.Name, keepIP); err != nil {
		return err
	}
	for _, ep := range stale {
		if ep.HostVeth == "" || a.Conf.Keeps(ep.ContainerID, ep.IfName) {
			continue
		}
		if err := host.DeleteLink(ep.HostVeth); err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "delete stale veth %s: %w", ep.HostVeth, err)
		}
	}
	return attach.FinishGC(ctx, a, c.DataDir, stale)
}
