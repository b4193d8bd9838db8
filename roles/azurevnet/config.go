package azurevnet

import (
	"net/netip"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/bridge"
)

// The modes of azure-vnet cnibox does, as Azure CNI names them.
const (
	ModeBridge      = "bridge"
	ModeTransparent = "transparent"
)

// conf is azure-vnet's own part of the config, common to both modes.
type conf struct {
	Mode   string `json:"mode"`
	Master string `json:"master"`
	// IPsToRouteViaHost are addresses (node-local DNS) the pod reaches
	// through the node's own stack rather than the fabric. In transparent
	// mode every packet of the pod is routed by the node, so they need
	// nothing more, as in Azure CNI; in bridge mode the bridge hands frames
	// to them to the node (fabric.go's ensureViaHost), as Azure's broute
	// rules do.
	IPsToRouteViaHost []string `json:"ipsToRouteViaHost"`
	MultiTenancy      bool     `json:"multiTenancy"`
	DataDir           string   `json:"dataDir"`
	IPAM              struct {
		Type string `json:"type"`
	} `json:"ipam"`
}

// fields decodes azure-vnet's own fields and checks what both modes share:
// the mode (lower-cased; "" is bridge, Azure's Linux default family), no
// multitenancy, no azure-cns IPAM, ipsToRouteViaHost of IPv4 addresses.
func fields(a *cniplug.Args) (conf, error) {
	var z conf
	if err := cniplug.DecodeConf("azure-vnet config", a.StdinData, &z); err != nil {
		return z, err
	}
	switch m := strings.ToLower(z.Mode); m {
	case "", ModeBridge:
		z.Mode = ModeBridge
	case ModeTransparent:
		z.Mode = m
	case "transparent-vlan":
		return z, cniplug.Errorf(types.ErrUnsupportedField, "config field \"mode\": %q (Azure's multitenancy with a VLAN per pod and azure-cns) is not supported by cnibox's azure-vnet, which does \"transparent\" and \"bridge\" (the default): set \"mode\": \"transparent\"", z.Mode)
	default:
		return z, cniplug.Errorf(types.ErrUnsupportedField, "config field \"mode\": %q is not supported by cnibox's azure-vnet, which does \"transparent\" and \"bridge\" (the default): set \"mode\": \"transparent\" or \"mode\": \"bridge\"", z.Mode)
	}
	if z.IPAM.Type == "azure-cns" {
		return z, cniplug.Errorf(types.ErrUnsupportedField, "config field \"ipam\": {\"type\": \"azure-cns\"} (Azure's Container Networking Service, for Swift and overlay clusters) is not supported by cnibox: use \"ipam\": {\"type\": \"azure-vnet-ipam\"} (the node's NIC's secondary IPs, from the host agent)")
	}
	if z.MultiTenancy {
		return z, cniplug.Errorf(types.ErrUnsupportedField, "config field \"multiTenancy\": true is not supported by cnibox's azure-vnet: remove it (cnibox gives every pod an address of the node's VNet)")
	}
	if z.Master != "" {
		if err := checkName("master", z.Master); err != nil {
			return z, err
		}
	}
	for _, s := range z.IPsToRouteViaHost {
		if ip, err := netip.ParseAddr(s); err != nil || !ip.Is4() {
			return z, cniplug.ConfError("ipsToRouteViaHost", "%q is not an IPv4 address: list addresses such as node-local DNS's \"169.254.20.10\"", s)
		}
	}
	return z, nil
}

// parse is the bridge mode's Parse hook. The gateway lives in the fabric,
// so isGateway and isDefaultGateway are ignored (the default route comes
// from IPAM).
func parse(a *cniplug.Args, c *bridge.Conf) error {
	if _, err := fields(a); err != nil {
		return err
	}
	c.IsGateway, c.IsDefaultGW = false, false
	return nil
}

func checkName(field, name string) error {
	if len(name) > 15 || strings.ContainsAny(name, "/: \t\n") {
		return cniplug.ConfError(field, "%q is not a valid interface name", name)
	}
	return nil
}
