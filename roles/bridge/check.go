package bridge

import (
	"context"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/roles/internal/podns"
)

// check verifies the attachment against prevResult: the pod interface (by
// name, in any sandbox), its addresses and routes, the host end on the
// bridge and up, its source address check (ipspoofchk), and the masquerade
// entries. With disableContainerInterface it is checkDown.
func check(ctx context.Context, a *cniplug.Args, c *Conf) error {
	hostName := c.HostVethName(a.ContainerID, a.IfName)
	node := attach.NodeCheck(a, nft.SrcCheckBridge, hostName, attach.SpoofCheckOn(c.IPSpoofChk) && !c.DisableContainerInterface,
		func(host *netops.Handle, _ *current.Result) error { return checkPort(host, c, hostName) })
	if c.DisableContainerInterface {
		return checkDown(ctx, a, node)
	}
	return attach.Check(ctx, a, attach.CheckOpts{Prev: attach.PrevByName, IPMasq: c.IPMasq, Node: node})
}

// checkDown is the CHECK of an attachment with disableContainerInterface,
// whose ADD ran no IPAM and left the pod's interface down: the interface
// is there with the MAC of the ADD result, down or up (whoever uses it may
// have set it up), and node, the host end's check, passes.
func checkDown(ctx context.Context, a *cniplug.Args, node func(*netops.Handle, *current.Result) error) error {
	prev, podIdx, err := attach.PrevByName(ctx, a)
	if err != nil {
		return err
	}
	mac := ""
	if podIdx >= 0 {
		mac = prev.Interfaces[podIdx].Mac
	}
	if err := podns.In(a.Netns, func(pod *netops.Handle) error { return checkPodEnd(pod, a.IfName, mac) }); err != nil {
		return err
	}
	return podns.InHost(func(host *netops.Handle) error { return node(host, prev) })
}
