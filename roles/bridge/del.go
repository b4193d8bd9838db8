package bridge

import (
	"context"
	"net/netip"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/fault"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/roles/internal/attach"
)

// del removes the attachment. Everything already gone counts as removed, and
// it works with an empty CNI_NETNS: the host veth name is derived from the
// container ID and ifname, the masquerade entries from the endpoint record or
// prevResult. The node's handle host stays open across the veth delete, so
// the nftables socket's cleanup wait overlaps the veth's (see perf-notes).
//
// The masquerade entries (and the hook's state) go before the addresses are
// freed, with the store's lock held from the read of the addresses
// (attach.ReleaseWith): freed first, a concurrent ADD could take one and add
// its own entries, which this DEL would then remove (a storm test caught a
// pod left without its masquerade entry). The store's lock is not held across
// the veth delete.
func del(ctx context.Context, a *cniplug.Args, c *Conf, host *netops.Handle) error {
	err := attach.ReleaseWith(ctx, a, c.DataDir, attach.ReleaseOpts{
		Unhook: func(ips []netip.Addr) error {
			u := nft.PodUnhook{IPs: ips, Masq: c.IPMasq, CheckKind: nft.SrcCheckBridge}
			if attach.SpoofCheckOn(c.IPSpoofChk) {
				u.CheckedPort = c.HostVethName(a.ContainerID, a.IfName)
			}
			if err := attach.Unhook(host, u); err != nil {
				return err
			}
			attach.PolicyRelease(ctx, a, ips)
			a.Mark("unhook")
			fault.Point("bridge/del/after-masq")
			return c.detachHook(ctx, a, host, ips)
		},
		Leftover: func() []netip.Addr { return leftoverIPs(a, c) },
	})
	if err != nil {
		return err
	}
	a.Mark("release")
	fault.Point("bridge/del/after-ipam")
	if err := deletePort(host, c, a, c.HostVethName(a.ContainerID, a.IfName)); err != nil {
		return err
	}
	a.Mark("veth")
	fault.Point("bridge/del/after-veth")
	return nil
}
