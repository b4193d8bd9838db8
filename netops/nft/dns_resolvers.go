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
	e4, e6, err := splitAddrs(addrs)
	if err == nil {
		_, err = h.reconcile(&tableSpec{table: dnsTableObj(), what: "the DNS table's trusted resolvers", sets: dnsSets(nil, nil, e4, e6, false)})
	}
	if err != nil {
		return fmt.Errorf("set the DNS table's trusted resolvers %v in %s: %w", addrs, h.where(), classify(err))
	}
	return nil
}

// DNSResolvers returns the DNS table's trusted resolvers (none when the
// table is not there).
func (h *Handle) DNSResolvers() ([]netip.Addr, error) { return h.dnsAddrs(dnsRes4, dnsRes6) }
