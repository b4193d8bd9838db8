package portmap

import (
	"fmt"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
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

// checkHostIPs refuses (code 7) an entry whose hostIP is not an address of
// the node, as isLocal (the kernel's answer in the namespace the plugin
// runs in) says: forwarding another machine's address would capture the
// connections that pods and the node make to it. The DNAT rules ignore such
// an element anyway (`fib daddr type local`); refusing it tells the user.
// The loopback range is local (the reference plugin forwards 127.0.0.1 too).
func (c *portmapConf) checkHostIPs(isLocal func(netip.Addr) (bool, error)) error {
	for _, e := range c.entries {
		if !e.hostIP.IsValid() || e.hostIP.IsUnspecified() {
			continue
		}
		field := fmt.Sprintf("runtimeConfig.portMappings[%d].hostIP", e.index)
		local, err := isLocal(e.hostIP)
		if err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "config field %q: is %s an address of this node: %w", field, e.hostIP, err)
		}
		if !local {
			return cniplug.ConfError(field, "%s is not an address of this node: only connections to the node's own addresses are forwarded; "+
				"use one of the node's addresses, or \"0.0.0.0\" / \"::\" or no hostIP for every address of the node", e.hostIP)
		}
	}
	return nil
}
