package whereabouts

import (
	"context"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
)

// Role is the whereabouts IPAM plugin. It talks to a server (the agent), so
// it never joins its caller's store transaction.
var Role = &cniplug.Role{
	Name: "whereabouts",
	IPAM: true,
	About: "whereabouts hands out addresses that are unique across the cluster from the ranges of whereabouts' " +
		"\"ipam\" section (\"range\": \"192.168.2.0/24\" or \"192.168.2.225-192.168.2.230/24\", range_start, range_end, " +
		"exclude, ipRanges, network_name, enable_overlapping_ranges, node_slice_size, gateway, routes, dns, addresses), " +
		"kept in whereabouts' IPPool CRDs. It asks cnibox-agent (--cluster-ipam) on its unix socket " +
		"(/run/cnibox/agent.sock or \"agentSocket\"), which holds the API credentials; it honours CNI_ARGS IP= " +
		"and the ips capability. See docs/roles/whereabouts.md.",
	Add:    cmdAdd,
	Check:  cmdCheck,
	Del:    cmdDel,
	GC:     cmdGC,
	Status: cmdStatus,
}

// The verbs of Role, named functions so that Role is data (see cniplug.Role).
func cmdAdd(ctx context.Context, a *cniplug.Args) (types.Result, error) {
	return cniplug.AddWithConf(ctx, a, loadConfig, add)
}

func cmdCheck(ctx context.Context, a *cniplug.Args) error {
	return cniplug.WithConf(ctx, a, loadConfig, check)
}

func cmdDel(ctx context.Context, a *cniplug.Args) error {
	return cniplug.WithConf(ctx, a, loadConfig, del)
}

func cmdGC(ctx context.Context, a *cniplug.Args) error {
	return cniplug.WithConf(ctx, a, loadConfig, gc)
}

func cmdStatus(ctx context.Context, a *cniplug.Args) error {
	return cniplug.WithConf(ctx, a, loadConfig, status)
}
