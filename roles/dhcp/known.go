package dhcp

import (
	"github.com/cnibox/cnibox/cniplug"
)

// known is what the role declares about itself for cnibox check, doctor,
// gc and store rebuild (see cniplug.Known).
var known = cniplug.Known{
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
