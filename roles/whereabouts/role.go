package whereabouts

import (
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
	Verbs: &cniplug.ConfVerbs[*config]{Parse: loadConfig, Add: add, Check: check, Del: del, GC: gc, Status: status},

	Known: &known,
}
