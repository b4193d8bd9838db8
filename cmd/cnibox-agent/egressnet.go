package main

import (
	"net/netip"

	"github.com/cnibox/cnibox/agent/netconf"
	"github.com/cnibox/cnibox/store"
)

// overlayNetworks are the cluster networks the egress gateways and the
// LoadBalancer announcer (--lb-announce) are served for, from
// net-conf.json: the IPv4 one when EnableIPv4, the IPv6 one when
// EnableIPv6 (issue 64: a single-stack IPv6 cluster has both as an IPv4
// one does; they started only with EnableIPv4); none: the agent serves
// neither.
func overlayNetworks(c *netconf.Config) []netip.Prefix {
	var nets []netip.Prefix
	if c == nil {
		return nil
	}
	if c.EnableIPv4 && c.Network.IsValid() {
		nets = append(nets, c.Network.Masked())
	}
	if c.EnableIPv6 && c.IPv6Network.IsValid() {
		nets = append(nets, c.IPv6Network.Masked())
	}
	return nets
}

// overlayUplink reads the overlay agent's record for its uplink, once it
// holds its lease; the cluster networks are networks (overlayNetworks':
// IPv4, IPv6 or both; none: no egress).
func overlayUplink(dataDir string, networks []netip.Prefix) (string, []netip.Prefix, bool) {
	var masked []netip.Prefix
	for _, n := range networks {
		if n.IsValid() {
			masked = append(masked, n.Masked())
		}
	}
	if len(masked) == 0 {
		return "", nil, false
	}
	s, err := store.OpenWith(store.Dir(dataDir), store.Options{NoCreate: true})
	if err != nil {
		return "", nil, false
	}
	defer s.Close()
	states, err := s.Overlays()
	if err != nil {
		return "", nil, false
	}
	for _, st := range states {
		if st.Ready && !st.Stopped && st.Lease.Iface != "" {
			return st.Lease.Iface, masked, true
		}
	}
	return "", nil, false
}
