package nodestate

import (
	"encoding/json"
	"strings"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/azurevnet"
)

// azureTransparent is the key of bridgeNetworks' map for azure-vnet
// networks in transparent mode, whose host veths are on no bridge.
const azureTransparent = "azure-vnet transparent"

// azureNetwork files an azure-vnet network config (pc, the plugin's JSON)
// in byBridge: under its bridge (default azure0) in bridge mode, under
// azureTransparent in transparent mode.
func azureNetwork(pc []byte, nc netConf, byBridge map[string][]netConf) {
	var z struct {
		Mode string `json:"mode"`
	}
	if json.Unmarshal(pc, &z) != nil {
		return
	}
	key := nc.bridge
	switch {
	case strings.EqualFold(z.Mode, azurevnet.ModeTransparent):
		key = azureTransparent
	case key == "":
		key = azurevnet.Bridge
	}
	byBridge[key] = append(byBridge[key], nc)
}

// azureVeth fills in r for an azure-vnet host veth: on a bridge, bridge
// mode; on none, transparent mode, when the node routes the peer's
// addresses to it (the pod's gateways are then the virtual ones). A veth
// on no bridge that routes none of them is skipped: false.
func azureVeth(host *netops.Handle, hv netops.Link, r *Recovered, warn func(string, ...any)) bool {
	r.Plugin = "azure-vnet"
	if hv.MasterIndex != 0 {
		return true
	}
	if !routesPeer(host, hv.Name, "azure-vnet transparent", r, warn) {
		return false
	}
	r.Bridge = ""
	r.Extra = map[string]string{"mode": azurevnet.ModeTransparent}
	r.Gateways, r.Routes = azurevnet.PodGateways(r.IPs)
	return true
}
