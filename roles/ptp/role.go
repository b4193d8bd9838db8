package ptp

import (
	"context"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/attach"
)

// Role is the "ptp" role.
var Role = &cniplug.Role{
	Name: "ptp",
	About: "ptp connects the pod to the node with a veth pair and no bridge: the pod end is CNI_IFNAME with the " +
		"addresses from the ipam section, the host end gets the gateway address as a /32 (/128) and the node a " +
		"host route to each pod address; the pod reaches everything through the gateway. ipMasq masquerades the " +
		"pod's traffic with nftables.",
	Verbs: &cniplug.ConfVerbs[*Conf]{Parse: parseConf, Add: add, Check: check, Del: delOnHost, GC: gcOnHost,
		ParseStatus: cniplug.Unparsed[*Conf], Status: attach.Status[*Conf]},

	Known: &known,
}

// delOnHost and gcOnHost are del and gc in the node's namespace.
func delOnHost(ctx context.Context, a *cniplug.Args, c *Conf) error {
	return attach.OnHost(del)(ctx, a, c)
}

func gcOnHost(ctx context.Context, a *cniplug.Args, c *Conf) error {
	return attach.OnHost(gc)(ctx, a, c)
}
