package vlan

import (
	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/lower"
)

// conf is what vlan reads beyond lower's fields (master, mtu,
// linkInContainer, dns, dataDir), which lower parses and checks.
type conf struct {
	VlanID int
	MTU    int

	lower *lower.Conf // DEL's and GC's config (parseLower)
}

// vlanJSON is what vlan decodes beyond lower's fields.
type vlanJSON struct {
	VlanID *int   `json:"vlanId"`
	MTU    int    `json:"mtu"`
	Mode   string `json:"mode"`
}

// parse decodes and checks vlanId (required, 0..4094, as the reference
// validates it) and refuses "mode", which a vlan device does not have.
func parse(a *cniplug.Args) (conf, error) {
	var raw vlanJSON
	if err := cniplug.DecodeConf("vlan config", a.StdinData, &raw); err != nil {
		return conf{}, err
	}
	if raw.Mode != "" {
		return conf{}, cniplug.Errorf(types.ErrUnsupportedField, "config field \"mode\" %q: a vlan device has no mode: drop \"mode\" (macvlan and ipvlan have modes)", raw.Mode)
	}
	switch {
	case raw.VlanID == nil:
		return conf{}, cniplug.ConfError("vlanId", "missing: set the 802.1Q VLAN ID the pod's interface tags its frames with, 0 to %d", netops.MaxVlanID)
	case *raw.VlanID < 0 || *raw.VlanID > netops.MaxVlanID:
		return conf{}, cniplug.ConfError("vlanId", "%d is not a VLAN ID: use 0 to %d (4095 is reserved)", *raw.VlanID, netops.MaxVlanID)
	}
	return conf{VlanID: *raw.VlanID, MTU: raw.MTU}, nil
}
