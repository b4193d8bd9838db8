package vxlan

import (
	"github.com/cnibox/cnibox/cniplug"
)

// known is what the role declares about itself for cnibox check, doctor,
// gc and store rebuild (see cniplug.Known).
var known = cniplug.Known{
	Kernel: []cniplug.KernelFeature{{Module: "vxlan", Config: "CONFIG_VXLAN"}},
	Config: []any{(*conf)(nil), (*passedOn)(nil)},
	Parse:  parseOnly,
}

// parseOnly is the parse of ADD, for `cnibox check`, and of the fields
// it passes on as flannel's parser reads them (an ADD fails there).
func parseOnly(a *cniplug.Args) error {
	if _, err := parseConf(a); err != nil {
		return err
	}
	return cniplug.DecodeConf("vxlan config", a.StdinData, &passedOn{})
}

// passedOn are the fields vxlan hands to flannel's plugin with the config
// (docs/roles/vxlan.md): the delegate's settings.
type passedOn struct {
	Delegate map[string]any `json:"delegate"`
}
