package bridge

import (
	"context"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/roles/internal/podns"
)

// check verifies the attachment against prevResult: the pod interface (by
// name, in any sandbox), its addresses and routes, the host end on the
// bridge and up, and the masquerade entries. With disableContainerInterface
// it is checkDown.
func check(ctx context.Context, a *cniplug.Args, c *Conf) error {
	if c.DisableContainerInterface {
		return checkDown(ctx, a, c)
	}
	return attach.Check(ctx, a, attach.CheckOpts{
		Prev:   attach.PrevByName,
		IPMasq: c.IPMasq,
		Node: func(host *netops.Handle, _ *current.Result) error {
			return checkPort(host, c, c.HostVethName(a.ContainerID, a.IfName))
		},
	})
}

// checkDown is the CHECK of an attachment with disableContainerInterface,
// whose ADD ran no IPAM and left the pod's interface down: the interface
// is there with the MAC of the ADD result, down or up (whoever uses it may
// have set it up), and the host end is on the bridge and up.
func checkDown(ctx context.Context, a *cniplug.Args, c *Conf) error {
	prev, podIdx, err := attach.PrevByName(ctx, a)
	if err != nil {
		return err
	}
	err = podns.In(a.Netns, func(pod *netops.Handle) error {
		l, err := pod.LinkByName(a.IfName)
		if err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "interface %q in the pod: %w", a.IfName, err)
		}
		if podIdx >= 0 {
			if want := prev.Interfaces[podIdx].Mac; want != "" && want != l.MAC.String() {
				return cniplug.Errorf(types.ErrIOFailure, "interface %q in the pod has MAC %s, the ADD result says %s", a.IfName, l.MAC, want)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	host, err := podns.Host()
	if err != nil {
		return err
	}
	defer host.Close()
	return checkPort(host, c, c.HostVethName(a.ContainerID, a.IfName))
}
