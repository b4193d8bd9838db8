package main

import (
	"net/netip"

	"github.com/cnibox/cnibox/agent/netconf"
)

// lbAnnounceNetworks are the cluster networks with which the LoadBalancer
// announcer (--lb-announce) starts: egressNetworks', each family
// net-conf.json enables (the announcer waits for the overlay's lease on
// one of them, then holds each pool address on the uplink whose network
// contains it, IPv4 by ARP, IPv6 by neighbour discovery); none: it does
// not start. A single-stack IPv6 cluster's LoadBalancer addresses are
// announced as an IPv4 one's (issue 64: it started only with EnableIPv4,
// waiting for the IPv4 network).
func lbAnnounceNetworks(c *netconf.Config) []netip.Prefix { return egressNetworks(c) }
