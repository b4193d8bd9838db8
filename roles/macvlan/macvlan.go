// Package macvlan is the "macvlan" main plugin: a macvlan device on a
// master interface of the node (default: the interface of the default
// route), created in the pod as CNI_IFNAME with its own MAC, the addresses
// and routes from IPAM, announced with gratuitous ARP and unsolicited
// neighbour advertisements. The pod appears on the master's LAN as a host
// of its own.
package macvlan

import (
	"context"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/roles/internal/lower"
)

// Role is the "macvlan" role.
var Role = &cniplug.Role{
	Name: "macvlan",
	About: "macvlan puts a macvlan device of a node interface (\"master\", default: the interface of the " +
		"default route; with \"linkInContainer\", an interface of the pod) into the pod as CNI_IFNAME, with its own MAC " +
		"(\"mac\" or the mac capability) and the addresses and routes from the ipam section: the pod is a host of the " +
		"master's LAN. \"mode\" is bridge (default), private, vepa, passthru or source.",
	Add:    cmdAdd,
	Check:  cmdCheck,
	Del:    cmdDel,
	GC:     cmdGC,
	Status: attach.Status,
}

// The verbs of Role, named functions so that Role is data (see cniplug.Role).
func cmdAdd(ctx context.Context, a *cniplug.Args) (types.Result, error) {
	return lower.Macvlan.Add(ctx, a)
}
func cmdCheck(ctx context.Context, a *cniplug.Args) error { return lower.Macvlan.Check(ctx, a) }
func cmdDel(ctx context.Context, a *cniplug.Args) error   { return lower.Macvlan.Del(ctx, a) }
func cmdGC(ctx context.Context, a *cniplug.Args) error    { return lower.Macvlan.GC(ctx, a) }
