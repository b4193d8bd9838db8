package ptp

import (
	"context"
	"net/netip"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/roles/internal/attach"
)

// del removes the attachment: masquerade entries, the addresses (IPAM and
// the endpoint record), then the veth pair, whose routes and gateway
// addresses go with it. Everything already gone counts as removed, and it
// works with the pod's namespace gone: the host veth's name is derived from
// the container ID and ifname.
func del(ctx context.Context, a *cniplug.Args, c *Conf, host *netops.Handle) error {
	hostName := attach.HostVethName(a.ContainerID, a.IfName)
	unhook := func(ips []netip.Addr) error {
		u := nft.PodUnhook{IPs: ips, Masq: c.IPMasq, CheckKind: nft.SrcCheckRouted}
		if attach.SpoofCheckOn(c.IPSpoofChk) {
			u.CheckedPort = hostName
		}
		if err := attach.Unhook(host, u); err != nil {
			return err
		}
		attach.PolicyRelease(ctx, a, ips)
		return nil
	}
	return attach.DelVeth(ctx, a, c.DataDir, host, hostName, unhook)
}

// deleteSourceCheck removes the source address check of the host end
// hostName (a leftover of this attachment's earlier pair).
func deleteSourceCheck(host *netops.Handle, hostName string) error {
	return host.NFT().DeleteSourceCheck(nft.SrcCheckRouted, hostName, nil)
}

// gc removes what belongs to attachments of this network that are not in
// the valid list: their host veths (named in their endpoint records),
// masquerade entries of the network's addresses that no kept attachment
// holds, source address checks of our host veths that are gone, and the
// records; then GC of the IPAM plugin frees the addresses.
func gc(ctx context.Context, a *cniplug.Args, c *Conf, host *netops.Handle) error {
	kept, stale, err := attach.Endpoints(a, c.DataDir)
	if err != nil {
		return err
	}
	if err := attach.GCMasq(host, a.Conf.Name, attach.KeptIPs(kept)); err != nil {
		return err
	}
	if err := attach.DeleteStaleVeths(host, stale); err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, k := range a.Conf.GCKeep() {
		keep[attach.HostVethName(k.ContainerID, k.IfName)] = true
	}
	ours := func(name string) bool { return attach.IsVethName(attach.VethPrefix, name) }
	if err := attach.GCSourceChecks(host, nft.SrcCheckRouted, keep, ours); err != nil {
		return err
	}
	return attach.FinishGC(ctx, a, c.DataDir, stale)
}
