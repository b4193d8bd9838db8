package firewall

import (
	"context"
	"net/netip"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/chain"
)

// Role is the "firewall" role.
var Role = &cniplug.Role{
	Name: "firewall",
	About: "firewall lets the pod's addresses through the node's forward path (in iptables-nft's filter FORWARD " +
		"when it exists, so a DROP policy left by Docker does not cut the pods off; else in table cnibox-firewall), " +
		"keeps the operators' chain CNI-ADMIN first, and applies ingressPolicy same-bridge or isolated; " +
		"with backend firewalld (or left out while firewalld runs) it binds the addresses to firewalldZone over D-Bus instead. " +
		"It is a chained plugin: put it after the main plugin in a conflist.",
	Verbs: &chain.Verbs[*firewallConf]{Parse: parseConf, Add: firewallAdd, Check: firewallCheck, Status: firewallStatus,
		ParseDel: cniplug.Unparsed[*firewallConf], Del: firewallDel, ParseGC: cniplug.Unparsed[*firewallConf], GC: firewallGC},

	Known: &known,
}

// firewallStatus answers STATUS: ready, unless the config asks for
// firewalld and it is not running (code 50).
func firewallStatus(ctx context.Context, _ *cniplug.Args, c *firewallConf) error {
	fc, err := firewalldFor(ctx, c, codeNotReady)
	if fc != nil {
		fc.Close()
	}
	return err
}

// podAddrs returns the pod's addresses from prevResult: those of CNI_IFNAME
// in the pod (or with no interface given).
func podAddrs(prev *current.Result, ifname string) []netip.Addr {
	var out []netip.Addr
	for _, ipc := range prev.IPs {
		if i := ipc.Interface; i != nil && *i >= 0 && *i < len(prev.Interfaces) {
			ifc := prev.Interfaces[*i]
			if ifc.Name != ifname || ifc.Sandbox == "" {
				continue
			}
		}
		if a, ok := netip.AddrFromSlice(ipc.Address.IP); ok {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// bridgeOf returns the node-side bridge of prevResult: its first interface
// outside any sandbox (the bridge plugin lists the bridge first).
func bridgeOf(prev *current.Result) string {
	for _, ifc := range prev.Interfaces {
		if ifc.Sandbox == "" {
			return ifc.Name
		}
	}
	return ""
}
