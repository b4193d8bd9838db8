package nft

import (
	"fmt"
	"net/netip"

	"github.com/google/nftables"
)

// SetDNSResolvers makes addrs the DNS table's trusted resolvers (its
// resolvers sets' elements replaced, in one transaction; the table and
// sets are made when missing): only the pods' queries to them are
// diverted to the proxy (dns.go). None: nothing is diverted, and no
// answer is learned from.
func (h *Handle) SetDNSResolvers(addrs []netip.Addr) error {
	var e4, e6 []nftables.SetElement
	for _, a := range addrs {
		a = a.Unmap()
		switch {
		case a.Is4():
			e4 = append(e4, nftables.SetElement{Key: a.AsSlice()})
		case a.Is6():
			e6 = append(e6, nftables.SetElement{Key: a.AsSlice()})
		default:
			return fmt.Errorf("set the DNS table's trusted resolvers %v: %v is not an address", addrs, a)
		}
	}
	t, err := h.begin()
	if err != nil {
		return fmt.Errorf("set the DNS table's trusted resolvers %v in %s: %w", addrs, h.where(), err)
	}
	c := t.conn()
	table, _, _ := dnsObjects()
	res4, res6 := dnsResolverSets(table)
	c.AddTable(table)
	for _, s := range []struct {
		set   *nftables.Set
		elems []nftables.SetElement
	}{{res4, e4}, {res6, e6}} {
		if err := t.addSet(s.set, nil); err != nil {
			t.abort()
			return err
		}
		c.FlushSet(s.set)
		if len(s.elems) == 0 {
			continue
		}
		if err := c.SetAddElements(s.set, s.elems); err != nil {
			t.abort()
			return err
		}
	}
	if err := t.commit(); err != nil {
		return fmt.Errorf("set the DNS table's trusted resolvers %v in %s: %w", addrs, h.where(), classify(err))
	}
	return nil
}

// DNSResolvers returns the DNS table's trusted resolvers (none when the
// table is not there).
func (h *Handle) DNSResolvers() ([]netip.Addr, error) {
	if _, err := h.nftConn(); err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, set := range []string{dnsRes4, dnsRes6} {
		elems, err := h.dumpElems(DNSTable, set)
		if err != nil {
			return nil, fmt.Errorf("list the DNS table's trusted resolvers in %s: %w", h.where(), err)
		}
		for _, e := range elems {
			if a, ok := netip.AddrFromSlice(e.key); ok {
				out = append(out, a)
			}
		}
	}
	return out, nil
}
