package bridge

import (
	"slices"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/utils"

	"github.com/cnibox/cnibox/cniplug"
)

// DefaultBridge is the bridge name when the config gives none.
const DefaultBridge = "cni0"

// Conf is the bridge plugin's config, field names as in the reference plugin.
type Conf struct {
	Bridge        string      `json:"bridge"`
	IsGateway     bool        `json:"isGateway"`
	IsDefaultGW   bool        `json:"isDefaultGateway"`
	ForceAddress  bool        `json:"forceAddress"`
	IPMasq        bool        `json:"ipMasq"`
	IPMasqBackend string      `json:"ipMasqBackend,omitempty"`
	MTU           int         `json:"mtu"`
	HairpinMode   bool        `json:"hairpinMode"`
	PromiscMode   bool        `json:"promiscMode"`
	Vlan          int         `json:"vlan"`
	VlanTrunk     []VlanTrunk `json:"vlanTrunk,omitempty"`
	// PreserveDefaultVlan keeps VID 1 on the pod's port when vlan or
	// vlanTrunk is set (default: VID 1 is removed).
	PreserveDefaultVlan bool `json:"preserveDefaultVlan"`
	EnableDad           bool `json:"enabledad"`
	MacSpoofChk         bool `json:"macspoofchk"`
	// IPSpoofChk: what the pod sends must carry one of its addresses
	// (default on; false needs trust: the pod may send as any address).
	IPSpoofChk *bool `json:"ipspoofchk,omitempty"`
	// PortIsolation makes the pod's host veth an isolated bridge port: the
	// pod reaches the bridge (its gateway) and the ports that are not
	// isolated (an uplink), not the other isolated pods.
	PortIsolation bool `json:"portIsolation"`
	// DisableContainerInterface leaves the pod's interface down after ADD:
	// a layer 2 attachment, which takes no ipam section (as in the
	// reference plugin).
	DisableContainerInterface bool `json:"disableContainerInterface"`
	// DataDir is where the endpoint records are kept (default: see store.Dir).
	DataDir string `json:"dataDir,omitempty"`

	hooks *Hooks // steps of a role built on bridge (hooks.go)
	vlans []int  // the VIDs of VlanTrunk, sorted, each once
}

// VlanTrunk is one entry of vlanTrunk: one VID (id) or a range (minID..maxID).
type VlanTrunk struct {
	ID    *int `json:"id,omitempty"`
	MinID *int `json:"minID,omitempty"`
	MaxID *int `json:"maxID,omitempty"`
}

// parseConf decodes and validates the bridge fields of stdin.
func parseConf(a *cniplug.Args, defaults Conf) (*Conf, error) {
	c := defaults
	if err := cniplug.DecodeConf("bridge config", a.StdinData, &c); err != nil {
		return nil, err
	}
	if c.Bridge == "" {
		c.Bridge = DefaultBridge
	}
	if err := utils.ValidateInterfaceName(c.Bridge); err != nil {
		return nil, cniplug.ConfError("bridge", "%q is not a valid interface name: %s", c.Bridge, err.Msg)
	}
	if c.IsDefaultGW {
		c.IsGateway = true
	}
	if c.MTU < 0 || c.MTU > 65535 || (c.MTU > 0 && c.MTU < 68) {
		return nil, cniplug.ConfError("mtu", "%d is out of range: use 0 (kernel default) or 68..65535", c.MTU)
	}
	if c.Vlan < 0 || c.Vlan > 4094 {
		return nil, cniplug.ConfError("vlan", "%d is out of range: use 0 (no VLAN) or 1..4094", c.Vlan)
	}
	vlans, err := trunkVids(c.VlanTrunk)
	if err != nil {
		return nil, err
	}
	c.vlans = vlans
	switch c.IPMasqBackend {
	case "", "nftables", "iptables":
		// cnibox always uses nftables; "iptables" is accepted for drop-in configs.
	default:
		return nil, cniplug.Errorf(types.ErrUnsupportedField, `config field "ipMasqBackend" %q is not supported: use "nftables" or leave it out`, c.IPMasqBackend)
	}
	if err := c.parseHook(a); err != nil {
		return nil, err
	}
	return &c, nil
}

// trunkVids returns the VIDs vlanTrunk names, sorted, each once.
func trunkVids(tr []VlanTrunk) ([]int, error) {
	set := map[int]bool{}
	inRange := func(field string, v int) error {
		if v < 1 || v > 4094 {
			return cniplug.ConfError("vlanTrunk", "%s %d is out of range: use 1..4094", field, v)
		}
		return nil
	}
	for _, t := range tr {
		switch {
		case t.ID != nil:
			if err := inRange("id", *t.ID); err != nil {
				return nil, err
			}
			set[*t.ID] = true
		case t.MinID != nil && t.MaxID != nil:
			if err := inRange("minID", *t.MinID); err != nil {
				return nil, err
			}
			if err := inRange("maxID", *t.MaxID); err != nil {
				return nil, err
			}
			if *t.MaxID < *t.MinID {
				return nil, cniplug.ConfError("vlanTrunk", "minID %d is greater than maxID %d: swap them", *t.MinID, *t.MaxID)
			}
			for v := *t.MinID; v <= *t.MaxID; v++ {
				set[v] = true
			}
		default:
			return nil, cniplug.ConfError("vlanTrunk", `an entry needs "id", or "minID" and "maxID" together`)
		}
	}
	out := make([]int, 0, len(set))
	for v := range set {
		out = append(out, v)
	}
	slices.Sort(out)
	return out, nil
}
