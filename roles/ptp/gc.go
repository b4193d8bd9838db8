package ptp

import (
	"context"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/attach"
)

// gc removes what belongs to attachments of this network that are not in
// the valid list: their host veths (named in their endpoint records),
// masquerade entries of the network's addresses that no kept attachment
// holds, and the records; then GC of the IPAM plugin frees the addresses.
func gc(ctx context.Context, a *cniplug.Args) error {
	c, err := parseConf(a)
	if err != nil {
		return err
	}
	kept, stale, err := attach.Endpoints(a, c.DataDir)
	if err != nil {
		return err
	}
	host, err := netops.Open("")
	if err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	defer host.Close()
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
