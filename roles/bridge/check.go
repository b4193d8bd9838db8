package bridge

import (
	"context"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/attach"
)

// check verifies the attachment against prevResult: the pod interface (by
// name, in any sandbox), its addresses and routes, the host end on the
// bridge and up, and the masquerade entries.
func check(ctx context.Context, a *cniplug.Args, c *Conf) error {
	return attach.Check(ctx, a, attach.CheckOpts{
		Prev:   attach.PrevByName,
		IPMasq: c.IPMasq,
		Node: func(host *netops.Handle, _ *current.Result) error {
			return checkPort(host, c, c.HostVethName(a.ContainerID, a.IfName))
		},
	})
}
