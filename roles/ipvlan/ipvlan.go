// Package ipvlan is the "ipvlan" main plugin: an ipvlan device on a master
// interface of the node (default: the interface of the default route; in a
// chain, the single interface of prevResult), created in the pod as
// CNI_IFNAME. It shares the master's MAC; the pod has its own addresses
// (from IPAM, or prevResult's in a chain) and routes. Modes l2, l3, l3s.
package ipvlan

import (
	"context"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/roles/internal/lower"
)

// Role is the "ipvlan" role.
var Role = &cniplug.Role{
	Name: "ipvlan",
	About: "ipvlan puts an ipvlan device of a node interface (\"master\", default: the interface of the " +
		"default route, or in a chain the single interface of prevResult; with \"linkInContainer\", an interface of the " +
		"pod) into the pod as CNI_IFNAME, sharing the master's MAC, with the addresses and routes from the ipam section " +
		"(or prevResult's). \"mode\" is l2 (default), l3 or l3s.",
	Add:    cmdAdd,
	Check:  cmdCheck,
	Del:    cmdDel,
	GC:     cmdGC,
	Status: attach.Status,
}

// The verbs of Role, named functions so that Role is data (see cniplug.Role).
func cmdAdd(ctx context.Context, a *cniplug.Args) (types.Result, error) {
	return lower.Ipvlan.Add(ctx, a)
}
func cmdCheck(ctx context.Context, a *cniplug.Args) error { return lower.Ipvlan.Check(ctx, a) }
func cmdDel(ctx context.Context, a *cniplug.Args) error   { return lower.Ipvlan.Del(ctx, a) }
func cmdGC(ctx context.Context, a *cniplug.Args) error    { return lower.Ipvlan.GC(ctx, a) }
