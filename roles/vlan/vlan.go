// Package vlan is the "vlan" main plugin: an 802.1Q device of a master
// interface of the node (default: the interface of the default route; with
// linkInContainer, an interface of the pod), tagged with "vlanId" and
// created in the pod as CNI_IFNAME, with the addresses and routes from IPAM.
// The pod is a host of that VLAN of the master's LAN.
//
// It is the device kind of roles/internal/lower, as macvlan and ipvlan are:
// the VLAN ID goes into the device through the spec's Create, and CHECK adds
// the VLAN ID and MTU to lower's checks.
package vlan

import (
	"context"
	"strconv"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/roles/internal/lower"
	"github.com/cnibox/cnibox/store"
)

// kind is the device kind of lower that every verb but ADD runs: a vlan has
// no modes, so its only mode is "" (the mode netops reports for it).
// ExtraVlanID is the endpoint record's Extra key holding the VLAN ID.
const ExtraVlanID = "vlanId"

var kind = lower.Spec{Kind: "vlan", Modes: []string{""}}

// Role is the "vlan" role.
var Role = &cniplug.Role{
	Name: "vlan",
	About: "vlan puts an 802.1Q device of a node interface (\"master\", default: the interface of the " +
		"default route; with \"linkInContainer\", an interface of the pod) into the pod as CNI_IFNAME, tagged with " +
		"\"vlanId\" (0 to 4094), with the addresses and routes from the ipam section: the pod is a host of that VLAN.",
	Verbs: &cniplug.ConfVerbs[conf]{Parse: parse, Add: add, Check: check,
		ParseDel: parseLower, Del: del, ParseGC: parseLower, GC: gc,
		ParseStatus: cniplug.Unparsed[conf], Status: attach.Status[conf]},
	Known: &known,
}

// add runs lower's ADD with a spec whose Create tags the device with the
// config's VLAN ID and whose Record keeps it in the endpoint record (Extra
// "vlanId", which `cnibox inspect` shows).
func add(ctx context.Context, a *cniplug.Args, c conf) (types.Result, error) {
	s := kind
	s.Record = func(ep *store.Endpoint) { ep.Extra[ExtraVlanID] = strconv.Itoa(c.VlanID) }
	s.Create = func(m *netops.Handle, o netops.SubLinkOpts) (netops.SubLink, error) {
		v, err := m.EnsureVlan(netops.VlanOpts{Name: o.Name, Master: o.Master, Into: o.Into, ID: c.VlanID, MTU: o.MTU})
		return netops.SubLink{Link: v.Link}, err
	}
	lc, err := s.ParseConf(a)
	if err != nil {
		return nil, err
	}
	return lower.Add(ctx, a, lc)
}

// parseLower reads only lower's fields: DEL and GC are lower's, which
// need no vlanId.
func parseLower(a *cniplug.Args) (conf, error) {
	lc, err := kind.ParseConf(a)
	return conf{lower: lc}, err
}

// del and gc are lower's.
func del(ctx context.Context, a *cniplug.Args, c conf) error { return lower.Del(ctx, a, c.lower) }
func gc(ctx context.Context, a *cniplug.Args, c conf) error  { return lower.GC(ctx, a, c.lower) }
