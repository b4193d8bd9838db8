package lease

import (
	"math/big"
	mrand "math/rand"
	"math/rand/v2"
	"net/netip"

	"github.com/cnibox/cnibox/agent/netconf"
)

// maxEnumerate is how many candidate subnets PickFree lists before it
// switches to random probing.
const maxEnumerate = 1 << 16

// Range is the part of a cluster network that nodes lease from.
type Range struct {
	Network   netip.Prefix
	SubnetLen int
	Min, Max  netip.Addr
}

// Ranges returns the IPv4 and IPv6 ranges of cfg (invalid Network when the
// family is off).
func Ranges(cfg *netconf.Config) (v4, v6 Range) {
	if cfg.EnableIPv4 {
		v4 = Range{cfg.Network, cfg.SubnetLen, cfg.SubnetMin, cfg.SubnetMax}
	}
	if cfg.EnableIPv6 {
		v6 = Range{cfg.IPv6Network, cfg.IPv6SubnetLen, cfg.IPv6SubnetMin, cfg.IPv6SubnetMax}
	}
	return v4, v6
}

// Contains reports whether p is one of the range's subnets.
func (r Range) Contains(p netip.Prefix) bool {
	if !r.Network.IsValid() || !p.IsValid() || p.Bits() != r.SubnetLen || p != p.Masked() {
		return false
	}
	a := p.Addr()
	return r.Network.Contains(a) && !a.Less(r.Min) && !r.Max.Less(a)
}

// Size returns how many subnets the range has, as a decimal string.
func (r Range) Size() string {
	return netconf.Subnets(r.Min, r.Max, r.SubnetLen).String()
}

// Pick returns the subnet to lease from r: prev when it is one of r's and
// taken does not hold it, else a random free one (PickFree), else a
// FullError (leases is how many nodes hold one). A range whose family is off
// (invalid Network) picks nothing, without error.
func (r Range) Pick(prev netip.Prefix, taken map[netip.Prefix]bool, leases int) (netip.Prefix, error) {
	if !r.Network.IsValid() {
		return netip.Prefix{}, nil
	}
	if r.Contains(prev) && !taken[prev] {
		return prev, nil
	}
	if p, ok := r.PickFree(taken); ok {
		return p, nil
	}
	return netip.Prefix{}, FullError(r.Network, r.SubnetLen, leases, r.Size())
}

// PickFree returns a random subnet of r that taken does not hold, or false
// when every subnet is taken. Random picks keep nodes that start together
// from racing for the same subnet.
func (r Range) PickFree(taken map[netip.Prefix]bool) (netip.Prefix, bool) {
	if !r.Network.IsValid() {
		return netip.Prefix{}, false
	}
	total := netconf.Subnets(r.Min, r.Max, r.SubnetLen)
	if total.Cmp(big.NewInt(maxEnumerate)) <= 0 {
		n := int(total.Int64())
		free := make([]netip.Prefix, 0, n)
		for i := range n {
			p := netconf.NthSubnet(r.Min, r.SubnetLen, big.NewInt(int64(i)))
			if !taken[p] {
				free = append(free, p)
			}
		}
		if len(free) == 0 {
			return netip.Prefix{}, false
		}
		return free[rand.IntN(len(free))], true
	}
	// A huge range: probe at random; with fewer leases than maxEnumerate
	// most probes hit a free subnet.
	rnd := mrand.New(mrand.NewSource(rand.Int64()))
	for range 4 * maxEnumerate {
		i := new(big.Int).Rand(rnd, total)
		p := netconf.NthSubnet(r.Min, r.SubnetLen, i)
		if !taken[p] {
			return p, true
		}
	}
	return netip.Prefix{}, false
}
