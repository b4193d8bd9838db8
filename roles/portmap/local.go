package portmap

import (
	"fmt"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
)

// hasHostIP reports whether an entry names one address of the node (not
// every address: no hostIP, 0.0.0.0 or ::).
func (c *portmapConf) hasHostIP() bool {
	for _, e := range c.entries {
		if e.hostIP.IsValid() && !e.hostIP.IsUnspecified() {
			return true
		}
	}
	return false
}

// checkHostIPs refuses (code 7) an entry whose hostIP is not one of the
// node's own addresses, as own (netops' OwnAddr in the namespace the plugin
// runs in) says, unless it is in allowedHostIPs:
//
//   - an address the node does not take as local (another machine's): the
//     DNAT rules ignore such an element anyway (`fib daddr type local`);
//     refusing it tells the user;
//   - an address the node holds for another service (a Service address on
//     kube-ipvs0, NodeLocal DNSCache's 169.254.20.10, a VIP): a mapping on
//     it would capture the connections that pods and the node make to that
//     service. The reference plugin forwards these; cnibox does not, unless
//     the operator lists them.
//
// 127.0.0.1 is the node's (the reference plugin forwards it too).
func (c *portmapConf) checkHostIPs(own func(netip.Addr) (netops.NodeAddr, error)) error {
	for _, e := range c.entries {
		if !e.hostIP.IsValid() || e.hostIP.IsUnspecified() {
			continue
		}
		field := fmt.Sprintf("runtimeConfig.portMappings[%d].hostIP", e.index)
		n, err := own(e.hostIP)
		if err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "config field %q: is %s an address of this node: %w", field, e.hostIP, err)
		}
		switch {
		case n.NotOwn == netops.NotLocal:
			return cniplug.ConfError(field, "%s is not an address of this node: only connections to the node's own addresses are forwarded; "+
				"use one of the node's addresses, or \"0.0.0.0\" / \"::\" or no hostIP for every address of the node", e.hostIP)
		case n.Own() || c.allows(e.hostIP):
			continue
		}
		return cniplug.ConfError(field, "%s is not one of the node's own addresses: %s; a mapping on it would capture the connections that pods "+
			"and the node make to that service. Use one of the node's own addresses, or \"0.0.0.0\" / \"::\" or no hostIP for every address "+
			"of the node; if the node is meant to serve this address to pods' host ports, list it in the portmap config's \"allowedHostIPs\"",
			e.hostIP, n.Why())
	}
	return nil
}

// allows reports whether a is in one of the prefixes of allowedHostIPs.
func (c *portmapConf) allows(a netip.Addr) bool {
	for _, p := range c.allowed {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
