package hostlocal

import "github.com/cnibox/cnibox/cniplug"

// Role is the host-local IPAM plugin.
var Role = &cniplug.Role{
	Name:             "host-local",
	IPAM:             true,
	JoinsCallerStore: true,
	About: "host-local hands out IP addresses from the ranges in the config's \"ipam\" section " +
		"(\"ranges\": [[{\"subnet\": \"10.1.0.0/24\"}]], or the legacy \"subnet\"), one per range set, " +
		"round robin, and records them in cnibox's store (in dataDir, $CNIBOX_DATA_DIR or /var/lib/cnibox). " +
		"It honours requested addresses (CNI_ARGS IP=, args.cni.ips, the ips capability), the ipRanges " +
		"capability, \"routes\", \"resolvConf\", and cnibox's \"sticky\": true (a pod gets its previous address back).",
	Add:    add,
	Check:  check,
	Del:    del,
	GC:     gc,
	Status: status,
}

// StaticRole is the static IPAM plugin.
var StaticRole = &cniplug.Role{
	Name:             "static",
	IPAM:             true,
	JoinsCallerStore: true,
	About: "static returns the addresses written in the config's \"ipam\" section " +
		"(\"addresses\": [{\"address\": \"10.10.0.1/24\", \"gateway\": \"10.10.0.254\"}]) or passed by the runtime " +
		"(the ips capability, args.cni.ips, CNI_ARGS IP= and GATEWAY=), with \"routes\" and \"dns\". It stores nothing.",
	Add:   staticAdd,
	Check: staticCheck,
}
