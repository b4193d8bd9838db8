package bridge

import (
	"context"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/attach"
)

// Role is the "bridge" role.
var Role = &cniplug.Role{
	Name: "bridge",
	About: "bridge connects the pod to a Linux bridge on the node with a veth pair: the pod end is CNI_IFNAME, " +
		"the host end joins the bridge (default cni0). Addresses and routes come from the ipam section; " +
		"isGateway puts the gateway address on the bridge and ipMasq masquerades the pod's traffic with nftables.",
	Verbs: &cniplug.ConfVerbs[*Conf]{Parse: parsePlain, Add: add, Check: check, Del: delOnHost, GC: gcOnHost,
		ParseStatus: cniplug.Unparsed[*Conf], Status: attach.Status[*Conf]},

	Known: &known,
}

// parsePlain is the bridge role's own parse: no other defaults, no hooks.
func parsePlain(a *cniplug.Args) (*Conf, error) { return parseConf(a, Conf{}) }

// delOnHost and gcOnHost are del and gc in the node's namespace.
func delOnHost(ctx context.Context, a *cniplug.Args, c *Conf) error {
	return attach.OnHost(del)(ctx, a, c)
}

func gcOnHost(ctx context.Context, a *cniplug.Args, c *Conf) error {
	return attach.OnHost(gc)(ctx, a, c)
}

// Verbs are the bridge plugin's verbs for a role built on it (azure-vnet's
// bridge mode, whose own verbs call them): its configs start from
// Defaults, and Hooks adds its own steps (nil: none). A package-level Verbs
// is data: nothing runs at start-up.
type Verbs struct {
	Defaults Conf
	Hooks    *Hooks
}

// ParseConf decodes and validates stdin as v's verbs do, Hooks.Parse
// included.
func (v *Verbs) ParseConf(a *cniplug.Args) (*Conf, error) {
	c := v.Defaults
	c.hooks = v.Hooks
	return parseConf(a, c)
}

// Add is the bridge plugin's ADD.
func (v *Verbs) Add(ctx context.Context, a *cniplug.Args) (types.Result, error) {
	c, err := v.ParseConf(a)
	if err != nil {
		return nil, err
	}
	return add(ctx, a, c)
}

// Del is the bridge plugin's DEL; a config that ADD would refuse does not
// stop it (cniplug.ParseForDel).
func (v *Verbs) Del(ctx context.Context, a *cniplug.Args) error {
	c, err := cniplug.ParseForDel(a, v.ParseConf)
	if err != nil {
		return err
	}
	return delOnHost(ctx, a, c)
}

// Check is the bridge plugin's CHECK.
func (v *Verbs) Check(ctx context.Context, a *cniplug.Args) error {
	c, err := v.ParseConf(a)
	if err != nil {
		return err
	}
	return check(ctx, a, c)
}

// GC is the bridge plugin's GC.
func (v *Verbs) GC(ctx context.Context, a *cniplug.Args) error {
	c, err := v.ParseConf(a)
	if err != nil {
		return err
	}
	return gcOnHost(ctx, a, c)
}
