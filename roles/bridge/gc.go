package bridge

import (
	"context"
	"slices"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/roles/internal/attach"
)

// gc removes what belongs to attachments of this network that are not in the
// valid list: endpoint records, host veths (also ours on the bridge with no
// record), masquerade entries, MAC spoofing and source address checks of
// veths that are gone; then GC of the IPAM plugin releases addresses.
func gc(ctx context.Context, a *cniplug.Args, c *Conf, host *netops.Handle) error {
	kept, stale, err := attach.Endpoints(a, c.DataDir)
	if err != nil {
		return err
	}
	keepVeth := map[string]bool{}
	for _, k := range a.Conf.GCKeep() {
		keepVeth[c.HostVethName(k.ContainerID, k.IfName)] = true
	}
	if err := attach.GCMasq(host, a.Conf.Name, attach.KeptIPs(kept)); err != nil {
		return err
	}
	if err := gcVeths(host, c.Bridge, keepVeth, c.IsHostVeth); err != nil {
		return err
	}
	if err := c.gcHook(ctx, a, host, slices.Concat(kept, stale)); err != nil {
		return err
	}
	if err := gcMacSpoof(host, keepVeth, c.IsHostVeth); err != nil {
		return err
	}
	if err := attach.GCSourceChecks(host, nft.SrcCheckBridge, keepVeth, c.IsHostVeth); err != nil {
		return err
	}
	return attach.FinishGC(ctx, a, c.DataDir, stale)
}
