package dhcp

import (
	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/dhcp/proto"
)

// known is what the role declares about itself for cnibox check, doctor,
// gc and store rebuild (see cniplug.Known).
var known = cniplug.Known{
	NodeFiles: []cniplug.NodeFile{{Field: "daemonSocketPath", Default: proto.DefaultSocket, Socket: true,
		Fails: "every ADD fails: no dhcp daemon answers there", Fix: "start the daemon: cnibox dhcp daemon (docs/roles/dhcp.md)"}},
	Config: []any{(*ipamJSON)(nil)},

	Inspect: []cniplug.InspectCommand{{
		Name:  "dhcp",
		Usage: "the dhcp daemon's leases: address, server, state, last renewal, expiry",
		UsageText: "cnibox inspect dhcp [--network N] [--data-dir DIR] [--json]\n\n" +
			"Example: cnibox inspect dhcp --network lan",
		Network: true,
		List:    listLeases,
		Print:   printLeases,
	}},
	DoctorNode: doctorLeases,
	Companions: []string{DaemonBinary},
}
