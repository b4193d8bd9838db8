package vxlan

import (
	"bytes"
	"encoding/json"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/utils"

	"github.com/cnibox/cnibox/cniplug"
)

// defaultSubnetFile is where flanneld and cnibox-agent write the lease by
// default.
const defaultSubnetFile = "/run/flannel/subnet.env"

// conf is the vxlan role's own config. Everything else in the config
// ("delegate", "ipam", "runtimeConfig", ...) is flannel's and passed on.
type conf struct {
	// Device is the agent's VXLAN device, naming the overlay when a node
	// runs several agents; default: the only one recorded.
	Device string `json:"device"`
	// SubnetFile is the agent's subnet file; default: the one the agent
	// recorded, else /run/flannel/subnet.env.
	SubnetFile string `json:"subnetFile"`
}

func parseConf(a *cniplug.Args) (*conf, error) {
	c := &conf{}
	if err := cniplug.DecodeConf("vxlan config", a.StdinData, c); err != nil {
		return nil, err
	}
	if c.Device != "" {
		if err := utils.ValidateInterfaceName(c.Device); err != nil {
			return nil, cniplug.ConfError("device", "%q is not an interface name: %s (the agent's device is flannel.<VNI>)", c.Device, err.Msg)
		}
	}
	return c, nil
}

// flannelConf is this call's config handed to the flannel role: the same
// JSON with type "flannel", the subnet file resolved and the vxlan-only
// field removed. Other keys keep their bytes.
func flannelConf(stdin []byte, subnetFile string) ([]byte, error) {
	var m map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(stdin))
	if err := dec.Decode(&m); err != nil {
		return nil, cniplug.Errorf(types.ErrDecodingFailure, "vxlan config: %v", err)
	}
	m["type"] = json.RawMessage(`"flannel"`)
	sf, _ := json.Marshal(subnetFile)
	m["subnetFile"] = sf
	delete(m, "device")
	out, err := json.Marshal(m)
	if err != nil {
		return nil, cniplug.Errorf(types.ErrInternal, "vxlan: encode the delegate config: %w", err)
	}
	return out, nil
}
