package dummy

import (
	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/lower"
)

// known is what the role declares about itself for cnibox check, doctor,
// gc and store rebuild (see cniplug.Known).
var known = cniplug.Known{
	Kernel:    []cniplug.KernelFeature{{Module: "dummy", Config: "CONFIG_DUMMY"}},
	Config:    []any{(*lower.PodFields)(nil), (*lower.ModeField)(nil)},
	PodDevice: &cniplug.PodDevice{Link: "dummy", Gateway: cniplug.GatewayNowhere, Facts: []string{}},
}
