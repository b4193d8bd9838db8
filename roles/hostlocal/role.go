package hostlocal

import (
	"github.com/cnibox/cnibox/cniplug"
)

// roleName is the host-local role's name.
const roleName = "host-local"

// Role is the host-local IPAM plugin.
var Role = &cniplug.Role{
	Name:             roleName,
	IPAM:             true,
	JoinsCallerStore: true,
	About: "host-local hands out IP addresses from the ranges in the config's \"ipam\" section " +
		"(\"ranges\": [[{\"subnet\": \"10.1.0.0/24\"}]], or the legacy \"subnet\"), one per range set, " +
		"round robin, and records them in cnibox's store (in dataDir, $CNIBOX_DATA_DIR or /var/lib/cnibox). " +
		"It honours requested addresses (CNI_ARGS IP=, args.cni.ips, the ips capability), the ipRanges " +
		"capability, \"routes\", \"resolvConf\", and cnibox's \"sticky\": true (a pod gets its previous address back).",
	// DEL and GC need only the owners (see loadOwners).
	Verbs: &cniplug.ConfVerbs[*config]{Parse: loadRanges, Add: add, Check: check, Status: status,
		ParseDel: loadOwners, Del: del, ParseGC: loadOwners, GC: gc},

	Known: &known,
}
