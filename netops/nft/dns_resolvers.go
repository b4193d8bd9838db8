package nft

import (
	"fmt"
	"net/netip"
)

// SetDNSResolvers makes addrs the DNS table's trusted resolvers (its
// resolvers sets' elements replaced, in one transaction; the table and
// sets are made when missing): only the pods' queries to them are
// diverted to the proxy (dns.go). None: nothing is diverted, and no
// answer is learned from.
func (h *Handle) SetDNSResolvers(addrs []netip.Addr) error {
	table, _, _ := dnsObjects()
	res4, res6 := dnsResolverSets(table)
	if err := h.writeDNSAddrs(res4, res6, addrs, true); err != nil {
		return fmt.Errorf("set the DNS table's trusted resolvers %v: %w", addrs, err)
	}
	return nil
}

// DNSResolvers returns the DNS table's trusted resolvers (none when the
// table is not there).
func (h *Handle) DNSResolvers() ([]netip.Addr, error) { return h.dnsAddrs(dnsRes4, dnsRes6) }
