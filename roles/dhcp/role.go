package dhcp

import (
	"github.com/cnibox/cnibox/cniplug"
)

// Role is the dhcp IPAM plugin; `dhcp daemon` execs its daemon (cnibox-dhcp).
var Role = &cniplug.Role{
	Name: "dhcp",
	IPAM: true,
	About: "dhcp gets the pod's address from the LAN's DHCP server through the dhcp daemon " +
		"(`dhcp daemon`, listening on \"daemonSocketPath\", default /run/cni/dhcp.sock), which runs the DHCP " +
		"client in the pod's namespace, renews the lease for the pod's lifetime and keeps it in cnibox's store. " +
		"It reads \"request\", \"provide\" and \"priority\" as the reference plugin does.",
	Verbs:    &cniplug.ConfVerbs[*config]{Parse: loadConfig, Add: add, Check: check, Del: del, GC: gc, Status: status},
	Commands: []cniplug.Command{{Name: "daemon", Run: runDaemon}},

	Known: &known,
}
