package tap

import (
	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/lower"
)

// known is what the role declares about itself for cnibox check, doctor,
// gc and store rebuild (see cniplug.Known).
var known = cniplug.Known{
	Kernel:    []cniplug.KernelFeature{{Module: "tun", Config: "CONFIG_TUN"}},
	Config:    []any{(*lower.PodFields)(nil), (*lower.MACField)(nil), (*lower.ModeField)(nil), (*tapJSON)(nil)},
	PodDevice: &cniplug.PodDevice{Link: "tun", Gateway: cniplug.GatewayNowhere, Facts: []string{}},
	Doctor:    doctor,
}
