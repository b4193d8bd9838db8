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
func del(ctx context.Context, a *cniplug.Args) error {
	c, err := parseConf(a)
	if err != nil {
		return err
	}
	host, err := netops.Open("")
	if err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	defer host.Close()
	err = attach.Release(ctx, a, c.DataDir, func(ips []netip.Addr) error {
		if !c.IPMasq || len(ips) == 0 {
			return nil
		}
		if err := host.DeleteMasq(ips); err != nil {
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
