package static

import (
	"github.com/cnibox/cnibox/cniplug"
)

// Role is the static IPAM plugin. DEL, GC and STATUS have nothing to do: it
// keeps no records.
var Role = &cniplug.Role{
	Name:             "static",
	IPAM:             true,
	JoinsCallerStore: true,
	About: "static returns the addresses written in the config's \"ipam\" section " +
		"(\"addresses\": [{\"address\": \"10.10.0.1/24\", \"gateway\": \"10.10.0.254\"}]) or passed by the runtime " +
		"(the ips capability, args.cni.ips, CNI_ARGS IP= and GATEWAY=), with \"routes\" and \"dns\". It stores nothing.",
	Verbs: &cniplug.ConfVerbs[*config]{Parse: loadConfig, Add: add, Check: check},

	Known: &known,
}
