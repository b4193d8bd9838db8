package portmap

import (
	"github.com/cnibox/cnibox/cniplug"
)

// known is what the role declares about itself for cnibox check, doctor,
// gc and store rebuild (see cniplug.Known): it owns table inet
// cnibox-portmap, whose elements gc removes with its stale records
// (leftovers.go) and doctor checks against its records.
var known = cniplug.Known{
	Kernel: []cniplug.KernelFeature{{Module: "nf_tables", Config: "CONFIG_NF_TABLES"}},
	Config: []any{(*portmapConf)(nil)},
	Capabilities: []cniplug.Capability{{Name: "portMappings",
		Lost: "the runtime passes no port mappings: the pods' hostPorts are not forwarded"}},
	Leftovers:      &leftovers,
	DoctorForwards: doctorRecorded,
}
