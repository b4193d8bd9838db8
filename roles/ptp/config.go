package ptp

import (
	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
)

// Conf is the ptp plugin's config, field names as in the reference plugin.
type Conf struct {
	IPMasq        bool      `json:"ipMasq"`
	IPMasqBackend string    `json:"ipMasqBackend,omitempty"`
	MTU           int       `json:"mtu"`
	DNS           types.DNS `json:"dns"`
	// IPSpoofChk: what the pod sends must carry one of its addresses
	// (default on; false needs trust: the pod may send as any address).
	IPSpoofChk *bool `json:"ipspoofchk,omitempty"`
	// DataDir is where the endpoint records are kept (default: see store.Dir).
	DataDir string `json:"dataDir,omitempty"`
}

// parseConf decodes and validates the ptp fields of stdin.
func parseConf(a *cniplug.Args) (*Conf, error) {
	var c Conf
	if err := cniplug.DecodeConf("ptp config", a.StdinData, &c); err != nil {
		return nil, err
	}
	if c.MTU < 0 || c.MTU > 65535 || (c.MTU > 0 && c.MTU < 68) {
		return nil, cniplug.ConfError("mtu", "%d is out of range: use 0 (kernel default) or 68..65535", c.MTU)
	}
	switch c.IPMasqBackend {
	case "", "nftables", "iptables":
		// cnibox always uses nftables; "iptables" is accepted for drop-in configs.
	default:
		return nil, cniplug.Errorf(types.ErrUnsupportedField, `config field "ipMasqBackend" %q is not supported: use "nftables" or leave it out`, c.IPMasqBackend)
	}
	if a.Conf.IPAM.Type == "" {
		return nil, cniplug.ConfError("ipam", `ptp needs an IPAM plugin for the pod's addresses: add e.g. "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.1.0.0/24"}]]}`)
	}
	return &c, nil
}
