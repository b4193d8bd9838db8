package vlan

import (
	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/lower"
)

// known is what the role declares about itself for cnibox check, doctor,
// gc and store rebuild (see cniplug.Known).
var known = cniplug.Known{
	Config:    []any{(*lower.PodFields)(nil), (*lower.MasterFields)(nil), (*vlanJSON)(nil)},
	PodDevice: &cniplug.PodDevice{Link: "vlan", Gateway: cniplug.GatewayOffNode, Facts: []string{"master", "vlanId"}},
	Doctor:    doctor,
}
