package cloudipam

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/cnibox/cnibox/ipam"
	"github.com/cnibox/cnibox/store"
)

// nicKey identifies a cached pool: one subnet of one NIC.
type nicKey struct {
	mac    string
	subnet netip.Prefix
}

// merge combines a fresh answer with the cached pools: new addresses come
// in, vanished free ones go, and vanished ones that a pod still holds (inUse)
// stay as Vanished until released, so they are never handed out again but
// the pod's retries and CHECK still find them.
func merge(old, fresh []CloudNIC, inUse func(netip.Addr) bool) []CloudNIC {
	out := make([]CloudNIC, len(fresh))
	idx := map[nicKey]int{}
	listed := map[netip.Addr]bool{}
	for i, n := range fresh {
		n.Vanished = nil
		n.Addrs = slices.Clone(n.Addrs)
		out[i] = n
		idx[nicKey{n.MAC, n.Subnet}] = i
		for _, a := range n.Addrs {
			listed[a] = true
		}
	}
	for _, o := range old {
		for _, list := range [][]netip.Addr{o.Addrs, o.Vanished} {
			for _, a := range list {
				if listed[a] || !inUse(a) {
					continue
				}
				k := nicKey{o.MAC, o.Subnet}
				i, ok := idx[k]
				if !ok {
					i = len(out)
					idx[k] = i
					out = append(out, CloudNIC{MAC: o.MAC, Name: o.Name, Device: o.Device, Subnet: o.Subnet})
				}
				out[i].Vanished = append(out[i].Vanished, a)
				listed[a] = true
			}
		}
	}
	for i := range out {
		slices.SortFunc(out[i].Vanished, netip.Addr.Compare)
	}
	return out
}

// prune drops released addresses from the vanished ones, and pools left with
// nothing that only vanished addresses kept. It reports whether c changed.
func prune(c *CloudCache, released []store.Reservation) bool {
	if len(released) == 0 {
		return false
	}
	gone := map[netip.Addr]bool{}
	for _, r := range released {
		gone[r.Addr] = true
	}
	changed := false
	out := c.NICs[:0]
	for _, n := range c.NICs {
		had := len(n.Vanished)
		n.Vanished = slices.DeleteFunc(n.Vanished, func(a netip.Addr) bool { return gone[a] })
		if len(n.Vanished) != had {
			changed = true
			if len(n.Vanished) == 0 && len(n.Addrs) == 0 && len(n.Primary) == 0 {
				continue
			}
		}
		out = append(out, n)
	}
	c.NICs = out
	return changed
}

// pools turns the cached NICs into the allocator's pools. Vanished addresses
// are part of them (they are in use, so never chosen) so that a pod holding
// one keeps it on a retried ADD and passes CHECK.
func pools(c *config, cache *CloudCache) []ipam.Pool {
	out := make([]ipam.Pool, 0, len(cache.NICs))
	for _, n := range cache.NICs {
		p := ipam.Pool{
			Subnet: n.Subnet,
			Addrs:  append(slices.Clone(n.Addrs), n.Vanished...),
			What:   "secondary IPs",
			Owner:  "NIC " + macString(n.MAC),
			Fix:    fixFor(c, n),
		}
		if n.MAC == "" {
			p.Owner, p.What = "the pool", "addresses"
		}
		out = append(out, p)
	}
	return out
}

// fixFor is what a person can do when a pool is full.
func fixFor(c *config, n CloudNIC) string {
	var more string
	switch c.Provider {
	case ProviderAzure:
		more = "assign more secondary IPs to the NIC in Azure (ipConfigurations)"
	case ProviderAWS:
		more = "assign more secondary private IPv4 addresses to the ENI"
	default:
		more = "add addresses to " + c.Endpoint
	}
	if n.Name != "" {
		more += " (" + n.Name + " on this node)"
	}
	return strings.Join([]string{"release addresses (DEL, cnibox gc)", more}, " or ")
}
