package ipvlan

import (
	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/lower"
)

// known is what the role declares about itself for cnibox check, doctor,
// gc and store rebuild (see cniplug.Known).
var known = cniplug.Known{
	Kernel:    []cniplug.KernelFeature{{Module: "ipvlan", Config: "CONFIG_IPVLAN"}},
	Config:    []any{(*lower.PodFields)(nil), (*lower.MasterFields)(nil), (*lower.ModeField)(nil)},
	PodDevice: &cniplug.PodDevice{Link: "ipvlan", Gateway: cniplug.GatewayOffNode, Facts: []string{"master", "mode"}},
	NodeLinks: []cniplug.NodeLink{{Field: "master", Unless: "linkInContainer"}},
}
