package ptp

import (
	"context"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/roles/internal/podns"
)

// Role is the "ptp" role.
var Role = &cniplug.Role{
	Name: "ptp",
	About: "ptp connects the pod to the node with a veth pair and no bridge: the pod end is CNI_IFNAME with the " +
		"addresses from the ipam section, the host end gets the gateway address as a /32 (/128) and the node a " +
		"host route to each pod address; the pod reaches everything through the gateway. ipMasq masquerades the " +
		"pod's traffic with nftables.",
	Add:    cmdAdd,
	Check:  cmdCheck,
	Del:    cmdDel,
	GC:     cmdGC,
	Status: attach.Status,
}

// The verbs of Role, named functions so that Role is data (see cniplug.Role).
func cmdAdd(ctx context.Context, a *cniplug.Args) (types.Result, error) {
	return cniplug.AddWithConf(ctx, a, parseConf, add)
}

func cmdCheck(ctx context.Context, a *cniplug.Args) error {
	return cniplug.WithConf(ctx, a, parseConf, check)
}

func cmdDel(ctx context.Context, a *cniplug.Args) error {
	return cniplug.WithConf(ctx, a, parseConf, onHost(del))
}

func cmdGC(ctx context.Context, a *cniplug.Args) error {
	return cniplug.WithConf(ctx, a, parseConf, onHost(gc))
}

// onHost adapts a verb that works in the node's namespace: it opens it
// (code 5 when it cannot) and closes it when the verb is done.
func onHost(verb func(context.Context, *cniplug.Args, *Conf, *netops.Handle) error) func(context.Context, *cniplug.Args, *Conf) error {
	return func(ctx context.Context, a *cniplug.Args, c *Conf) error {
		host, err := podns.Host()
		if err != nil {
			return err
		}
		defer host.Close()
		return verb(ctx, a, c, host)
	}
}

// openNamespaces opens the pod's namespace at netns (code 3 when it cannot)
// and the node's (code 5); the caller closes both.
func openNamespaces(netns string) (pod, host *netops.Handle, err error) {
	if pod, err = podns.Open(netns); err != nil {
		return nil, nil, err
	}
	if host, err = podns.Host(); err != nil {
		_ = pod.Close()
		return nil, nil, err
	}
	return pod, host, nil
}
