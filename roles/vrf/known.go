package vrf

import (
	"github.com/cnibox/cnibox/cniplug"
)

// known is what the role declares about itself for cnibox check, doctor,
// gc and store rebuild (see cniplug.Known).
var known = cniplug.Known{
	Kernel: []cniplug.KernelFeature{{Module: "vrf", Config: "CONFIG_NET_VRF"}},
	Config: []any{(*vrfConfJSON)(nil)},
	Doctor: doctor,
}
