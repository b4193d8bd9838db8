package ipam

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/addrmath"
	"github.com/cnibox/cnibox/store"
	"github.com/containernetworking/cni/pkg/types"
)

// Pool is an explicit list of addresses of one subnet that may be handed
// out, such as the secondary IPs a cloud assigned to a NIC, as opposed to a
// contiguous range. Pools are allocated from by the same Allocate as ranges:
// PoolSets turns each run of consecutive addresses into a Range, so the
// order (held, requested, sticky, round robin) and the store's transaction
// are the same.
type Pool struct {
	Subnet netip.Prefix
	// Gateway is never handed out; default: the subnet's first host.
	Gateway netip.Addr
	// Addrs may be handed out. The network, broadcast and gateway addresses
	// are dropped; duplicates count once.
	Addrs []netip.Addr
	// Owner and What name the pool in messages: "all 30 <What> of <Owner>
	// in <Subnet> are in use", e.g. What "secondary IPs", Owner "NIC
	// 00:0d:3a:51:c4:90". What defaults to "addresses", Owner to "pool".
	Owner string
	What  string
	// Fix ends the exhaustion message: what a person can do about it.
	Fix string
}

// PoolSets turns pools into range sets for Allocate, Held and Usage: one set
// per IP family that has a pool (IPv4 first), each address run one Range.
// It also returns, per set, the indexes of its pools. field names the pools
// in error messages (code 7), e.g. "ipam.pools".
func PoolSets(field string, pools []Pool) (sets []RangeSet, members [][]int, err error) {
	var v4, v6 []int
	for i, p := range pools {
		if !p.Subnet.IsValid() || p.Subnet.Addr().Is4In6() {
			return nil, nil, cniplug.ConfError(fmt.Sprintf("%s[%d].subnet", field, i), "%v is not a usable subnet", p.Subnet)
		}
		if p.Subnet.Addr().Is4() {
			v4 = append(v4, i)
		} else {
			v6 = append(v6, i)
		}
	}
	var fields [][]string
	for _, fam := range [][]int{v4, v6} {
		if len(fam) == 0 {
			continue
		}
		var set RangeSet
		var names []string
		for _, i := range fam {
			rs, err := poolRanges(pools[i])
			if err != nil {
				return nil, nil, cniplug.ConfError(fmt.Sprintf("%s[%d]", field, i), "%v", err)
			}
			for range rs {
				names = append(names, fmt.Sprintf("%s[%d]", field, i))
			}
			set = append(set, rs...)
		}
		sets = append(sets, set)
		members = append(members, fam)
		fields = append(fields, names)
	}
	// Sets without any address are left to AllocatePools to report; the
	// checks of Canonicalize apply to the others.
	var check []RangeSet
	var checkFields [][]string
	for i, s := range sets {
		if len(s) > 0 {
			check = append(check, s)
			checkFields = append(checkFields, fields[i])
		}
	}
	if err := Canonicalize(check, func(s, i int) string { return checkFields[s][i] }); err != nil {
		return nil, nil, err
	}
	return sets, members, nil
}

// poolRanges returns the runs of consecutive usable addresses of p.
func poolRanges(p Pool) ([]Range, error) {
	subnet := p.Subnet.Masked()
	if subnet != p.Subnet {
		return nil, fmt.Errorf("subnet %s has host bits set", p.Subnet)
	}
	gw := p.Gateway
	if !gw.IsValid() {
		gw = subnet.Addr().Next()
	}
	network, last := subnet.Addr(), lastAddr(subnet)
	var addrs []netip.Addr
	for _, a := range p.Addrs {
		a = a.Unmap()
		switch {
		case !subnet.Contains(a):
			return nil, fmt.Errorf("address %v is outside subnet %s", a, subnet)
		case a == network, a == gw, a.Is4() && a == last:
			continue // never handed out
		}
		addrs = append(addrs, a)
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	addrs = slices.Compact(addrs)
	var out []Range
	for i := 0; i < len(addrs); {
		j := i
		for j+1 < len(addrs) && addrs[j].Next() == addrs[j+1] {
			j++
		}
		out = append(out, Range{Subnet: subnet, Start: addrs[i], End: addrs[j], Gateway: gw})
		i = j + 1
	}
	return out, nil
}

// AllocatePools reserves one address per IP family of pools for the
// attachment, with Allocate (req.Sets is replaced by PoolSets(pools)).
// Exhaustion (cniplug.CodePoolExhausted) names the pools of the full family,
// their subnets and their capacity: "all 30 secondary IPs of NIC
// 00:0d:3a:51:c4:90 in 10.240.0.0/16 are in use".
func AllocatePools(tx *store.IPAMTx, req Request, field string, pools []Pool) ([]Allocation, error) {
	sets, members, err := PoolSets(field, pools)
	if err != nil {
		return nil, err
	}
	network := req.Network
	if network == "" {
		network = tx.Network()
	}
	if len(sets) == 0 {
		return nil, cniplug.Errorf(types.ErrInvalidNetworkConfig, "network %q: no address pool to allocate from", network)
	}
	for i, s := range sets {
		if len(s) == 0 {
			return nil, poolsError(cniplug.CodePoolExhausted, network, pools, members[i], 0)
		}
	}
	req.Sets = sets
	if req.Cursors == nil {
		req.Cursors = poolCursors(pools, members)
	}
	out, err := Allocate(tx, req)
	if cniplug.CodeOf(err) != cniplug.CodePoolExhausted {
		return out, err
	}
	// Sets are filled in order and the first full one stops Allocate, so
	// the full set is the first where the attachment now holds nothing.
	_, missing := Held(tx, req.ContainerID, req.IfName, sets)
	if len(missing) == 0 {
		return nil, err
	}
	i := missing[0]
	return nil, poolsError(cniplug.CodePoolExhausted, network, pools, members[i], setSize(sets[i]))
}

// poolCursors names the round-robin cursors of pool sets: one per IP family
// ("pools/ipv4", "pools/ipv6"), not the sets' ranges, so a refresh that adds
// or drops addresses continues after the last address handed out instead of
// starting again at the first.
func poolCursors(pools []Pool, members [][]int) []string {
	out := make([]string, len(members))
	for i, m := range members {
		out[i] = "pools/ipv4"
		if len(m) > 0 && pools[m[0]].Subnet.Addr().Is6() {
			out[i] = "pools/ipv6"
		}
	}
	return out
}

// PoolsReady is Ready for pools: a "not ready" error (cniplug.CodeNotReady)
// naming the pools of every full family, nil when each has a free address.
func PoolsReady(tx *store.IPAMTx, network, field string, pools []Pool) error {
	sets, members, err := PoolSets(field, pools)
	if err != nil {
		return err
	}
	excluded := gateways(sets)
	var msgs []string
	for i, s := range sets {
		if len(s) > 0 && !usage(tx, s, excluded).Full {
			continue
		}
		msgs = append(msgs, poolsError(cniplug.CodeNotReady, network, pools, members[i], setSize(s)).Error())
	}
	if len(msgs) == 0 {
		return nil
	}
	return cniplug.Errorf(cniplug.CodeNotReady, "%s", strings.Join(msgs, "; "))
}

func setSize(s RangeSet) uint64 {
	var n uint64
	for _, r := range s {
		n = addrmath.SatAdd(n, r.size())
	}
	return n
}

// poolsError says that the pools idx (one family) have no free address.
func poolsError(code uint, network string, pools []Pool, idx []int, capacity uint64) error {
	var where []string
	what, fix := "", ""
	for _, i := range idx {
		p := pools[i]
		owner := p.Owner
		if owner == "" {
			owner = "pool"
		}
		where = append(where, fmt.Sprintf("%s in %s", owner, p.Subnet))
		if what == "" {
			what = p.What
		}
		if fix == "" {
			fix = p.Fix
		}
	}
	if what == "" {
		what = "addresses"
	}
	if fix == "" {
		fix = "release addresses (DEL, cnibox gc) or add addresses to the pool"
	}
	if capacity == 0 {
		return cniplug.Errorf(code, "network %q: there are no %s of %s to hand out: %s", network, what, strings.Join(where, " and "), fix)
	}
	return cniplug.Errorf(code, "network %q: all %d %s of %s are in use: %s", network, capacity, what, strings.Join(where, " and "), fix)
}
