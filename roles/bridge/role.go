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
	Verbs: &plain,

	Known: &known,
}

// plain are the bridge role's own verbs: no other defaults, no hooks.
var plain Verbs

// Verbs are the bridge plugin's verbs for a role built on it (azure-vnet's
// bridge mode): its configs start from Defaults, and Hooks adds its own
// steps (nil: none). A package-level Verbs is data: nothing runs at start-up.
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

// Run answers the call's verb as the bridge plugin (a cniplug.Verbs).
func (v *Verbs) Run(ctx context.Context, a *cniplug.Args) (types.Result, error) {
	hv := attach.HostVerbs[*Conf]{Parse: v.ParseConf, Add: add, Check: check, Del: del, GC: gc}
	return hv.Run(ctx, a)
}

// Add is the bridge plugin's ADD.
func (v *Verbs) Add(ctx context.Context, a *cniplug.Args) (types.Result, error) {
	return cniplug.AddWithConf(ctx, a, v.ParseConf, add)
}

// Del is the bridge plugin's DEL.
func (v *Verbs) Del(ctx context.Context, a *cniplug.Args) error {
	return cniplug.WithConf(ctx, a, v.ParseConf, attach.OnHost(del))
}

// Check is the bridge plugin's CHECK.
func (v *Verbs) Check(ctx context.Context, a *cniplug.Args) error {
	return cniplug.WithConf(ctx, a, v.ParseConf, check)
}

// GC is the bridge plugin's GC.
func (v *Verbs) GC(ctx context.Context, a *cniplug.Args) error {
	return cniplug.WithConf(ctx, a, v.ParseConf, attach.OnHost(gc))
}

// ParseConfig is the parse of ADD, for `cnibox check` (a cniplug.ConfigParser).
func (v *Verbs) ParseConfig(a *cniplug.Args) error {
	_, err := v.ParseConf(a)
	return err
}
