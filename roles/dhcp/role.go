package dhcp

import "github.com/cnibox/cnibox/cniplug"

// Role is the dhcp IPAM plugin; `dhcp daemon` execs its daemon (cnibox-dhcp).
var Role = &cniplug.Role{
	Name: "dhcp",
	IPAM: true,
	About: "dhcp gets the pod's address from the LAN's DHCP server through the dhcp daemon " +
		"(`dhcp daemon`, listening on \"daemonSocketPath\", default /run/cni/dhcp.sock), which runs the DHCP " +
		"client in the pod's namespace, renews the lease for the pod's lifetime and keeps it in cnibox's store. " +
		"It reads \"request\", \"provide\" and \"priority\" as the reference plugin does.",
	Add:      cniplug.AddWithConf(loadConfig, add),
	Check:    cniplug.WithConf(loadConfig, check),
	Del:      cniplug.WithConf(loadConfig, del),
	GC:       cniplug.WithConf(loadConfig, gc),
	Status:   cniplug.WithConf(loadConfig, status),
	Commands: []cniplug.Command{{Name: "daemon", Run: runDaemon}},
}
