package vlan

import (
	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/lower"
)

// known is what the role declares about itself for cnibox check, doctor,
// gc and store rebuild (see cniplug.Known).
var known = cniplug.Known{
	Kernel:    []cniplug.KernelFeature{{Module: "8021q", Config: "CONFIG_VLAN_8021Q"}},
	Config:    []any{(*lower.PodFields)(nil), (*lower.MasterFields)(nil), (*vlanJSON)(nil)},
	PodDevice: &cniplug.PodDevice{Link: "vlan", Gateway: cniplug.GatewayOffNode, Facts: []string{"master", "vlanId"}},
	NodeLinks: []cniplug.NodeLink{{Field: "master", Unless: "linkInContainer"}},
	Doctor:    doctor,
	Parse:     parseOnly,
}

// parseOnly is the parse of ADD, for cnibox check: vlan's fields, then
// the device fields lower parses when the ADD makes the device.
func parseOnly(a *cniplug.Args) error {
	if _, err := parse(a); err != nil {
		return err
	}
	_, err := kind.ParseConf(a)
	return err
}
