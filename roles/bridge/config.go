package bridge

import (
	"encoding/json"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/utils"

	"github.com/cnibox/cnibox/cniplug"
)

// DefaultBridge is the bridge name when the config gives none.
const DefaultBridge = "cni0"

// Conf is the bridge plugin's config, field names as in the reference plugin.
type Conf struct {
	Bridge        string `json:"bridge"`
	IsGateway     bool   `json:"isGateway"`
	IsDefaultGW   bool   `json:"isDefaultGateway"`
	ForceAddress  bool   `json:"forceAddress"`
	IPMasq        bool   `json:"ipMasq"`
	IPMasqBackend string `json:"ipMasqBackend,omitempty"`
	MTU           int    `json:"mtu"`
	HairpinMode   bool   `json:"hairpinMode"`
	PromiscMode   bool   `json:"promiscMode"`
	Vlan          int    `json:"vlan"`
	VlanTrunk     []any  `json:"vlanTrunk,omitempty"`
	EnableDad     bool   `json:"enabledad"`
	MacSpoofChk   bool   `json:"macspoofchk"`
	// DataDir is where the endpoint records are kept (default: see store.Dir).
	DataDir string `json:"dataDir,omitempty"`

	hooks *Hooks // steps of a role built on bridge (hooks.go)
}

// parseConf decodes and validates the bridge fields of stdin.
func parseConf(a *cniplug.Args, defaults Conf) (*Conf, error) {
	c := defaults
	if err := json.Unmarshal(a.StdinData, &c); err != nil {
		return nil, cniplug.Errorf(types.ErrDecodingFailure, "bridge config: %v", err)
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
	if len(c.VlanTrunk) > 0 {
		return nil, cniplug.Errorf(types.ErrUnsupportedField, `config field "vlanTrunk" is not supported by cnibox's bridge: remove it, or use "vlan" for an access port`)
	}
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
