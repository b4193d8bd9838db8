package bridge

import (
	"encoding/json"

	"github.com/cnibox/cnibox/cniplug"
)

// known is what the role declares about itself for cnibox check, doctor,
// gc and store rebuild (see cniplug.Known).
var known = cniplug.Known{
	Kernel:   []cniplug.KernelFeature{{Module: "bridge", Config: "CONFIG_BRIDGE"}, {Module: "veth", Config: "CONFIG_VETH"}},
	Config:   []any{(*Conf)(nil)},
	HostVeth: &hostVeth,
}

// hostVeth are the bridge role's host veths (cbx + hash), on a bridge, and
// ptp's, which share the scheme (attach.HostVethName) and are on none.
var hostVeth = cniplug.HostVeth{
	Prefix:     VethPrefix,
	Plugin:     "bridge",
	Routed:     "ptp",
	RoutedKey:  "",
	NetworkKey: networkKey,
}

// networkKey files a bridge network under its bridge (default cni0), a ptp
// network under "" (its veths are on no bridge).
func networkKey(typ string, conf []byte) (string, bool) {
	switch typ {
	case "ptp":
		return "", true
	case "bridge":
		var c struct {
			Bridge string `json:"bridge"`
		}
		if json.Unmarshal(conf, &c) != nil {
			return "", false
		}
		if c.Bridge == "" {
			c.Bridge = DefaultBridge
		}
		return c.Bridge, true
	}
	return "", false
}
