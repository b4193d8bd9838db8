// Package dhcp is the dhcp IPAM role: it asks the dhcp daemon (`dhcp
// daemon`, package daemon below) over its unix socket for a lease on the
// pod's interface and returns the leased address, the router, the routes
// (option 121 first) and DNS. The role itself is small: the DHCP client
// lives in the daemon, which keeps its leases in cnibox's store so that a
// restarted daemon adopts, renews and releases them. The wire protocol is
// package proto.
package dhcp
