package firewall

import (
	"github.com/cnibox/cnibox/cniplug"
)

// known is what the role declares about itself for cnibox check, doctor,
// gc and store rebuild (see cniplug.Known).
var known = cniplug.Known{
	Kernel: []cniplug.KernelFeature{{Module: "nf_tables", Config: "CONFIG_NF_TABLES"}},
	Config: []any{(*firewallConf)(nil)},
}
