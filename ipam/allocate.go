package ipam

import (
	"errors"
	"net/netip"
	"slices"
	"strings"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/store"
	"github.com/containernetworking/cni/pkg/types"
)

// Request asks for one address per range set for one attachment.
type Request struct {
	// Network names the network in messages; "" means the transaction's.
	Network     string
	ContainerID string
	IfName      string
	// Pod is "namespace/name" or "".
	Pod       string
	Sets      []RangeSet // canonicalized (Canonicalize or ParseSets)
	Requested []netip.Addr
	// Sticky gives a pod its previous addresses back while they are free.
	Sticky bool
	// Taken are addresses held outside the store (the reference
	// host-local's records on the node): never handed out.
	Taken []netip.Addr
	// Cursors, if set, names each set's round-robin cursor in the store
	// (one per set, "" for the default). The default is the set's ID (its
	// ranges), so a reconfigured set starts afresh; pools whose addresses
	// a provider's refresh changes keep one cursor per IP family
	// (AllocatePools), so round robin continues after the last address.
	Cursors []string
}

// Allocation is the address given to the attachment from one range set.
type Allocation struct {
	Addr    netip.Prefix // the address with its subnet's prefix length
	Gateway netip.Addr
	Set     int // index into Request.Sets
}

// Allocate reserves one address per range set for the attachment, in tx (so
// nothing is kept if a later set fails and the caller returns the error). See
// the package comment for the order in which addresses are chosen. Only round
// robin moves a set's cursor: requested and sticky addresses leave it alone,
// so they do not make the pool reuse released addresses early.
func Allocate(tx *store.IPAMTx, req Request) ([]Allocation, error) {
	a := allocator{tx: tx, req: req, network: req.Network}
	if a.network == "" {
		a.network = tx.Network()
	}
	if len(req.Sets) == 0 {
		return nil, cniplug.Errorf(types.ErrInvalidNetworkConfig, "network %q: no range sets to allocate from: configure at least one range", a.network)
	}
	a.out = make([]Allocation, len(req.Sets))
	a.done = make([]bool, len(req.Sets))
	a.excluded = gateways(req.Sets)
	a.taken = map[netip.Addr]bool{}
	for _, addr := range req.Taken {
		a.excluded[addr], a.taken[addr] = true, true
	}
	a.held = map[int]bool{}

	for _, r := range tx.ByOwner(req.ContainerID, req.IfName) {
		if i, rg, ok := a.find(r.Addr); ok && !a.done[i] {
			a.set(i, r.Addr, rg)
			a.held[i] = true
		}
	}
	for _, want := range req.Requested {
		if err := a.requested(want.Unmap()); err != nil {
			return nil, err
		}
	}
	if req.Sticky && req.Pod != "" {
		for _, prev := range tx.Sticky(req.Pod) {
			i, rg, ok := a.find(prev)
			if !ok || a.done[i] || a.excluded[prev] {
				continue
			}
			if _, taken := tx.Get(prev); taken {
				continue
			}
			if err := a.reserve(i, prev, rg); err != nil {
				return nil, err
			}
		}
	}
	for i, set := range req.Sets {
		if a.done[i] {
			continue
		}
		key := a.cursorKey(i)
		addr, rg, ok := a.next(set, key)
		if !ok {
			return nil, a.exhausted(set)
		}
		if err := a.reserve(i, addr, rg); err != nil {
			return nil, err
		}
		if err := tx.SetCursor(key, addr); err != nil {
			return nil, err
		}
	}
	if req.Sticky && req.Pod != "" {
		addrs := make([]netip.Addr, len(a.out))
		for i, al := range a.out {
			addrs[i] = al.Addr.Addr()
		}
		if !slices.Equal(addrs, tx.Sticky(req.Pod)) {
			if err := tx.SetSticky(req.Pod, addrs); err != nil {
				return nil, err
			}
		}
	}
	return a.out, nil
}

type allocator struct {
	tx       *store.IPAMTx
	req      Request
	network  string
	out      []Allocation
	done     []bool
	held     map[int]bool        // sets where the attachment already held its address
	excluded map[netip.Addr]bool // gateways and taken
	taken    map[netip.Addr]bool
}

func gateways(sets []RangeSet) map[netip.Addr]bool {
	m := map[netip.Addr]bool{}
	for _, set := range sets {
		for _, r := range set {
			m[r.Gateway] = true
		}
	}
	return m
}

// find returns the set and range that contain a.
func (a *allocator) find(addr netip.Addr) (int, Range, bool) {
	for i, set := range a.req.Sets {
		if r, ok := set.Range(addr); ok {
			return i, r, true
		}
	}
	return 0, Range{}, false
}

func (a *allocator) set(i int, addr netip.Addr, r Range) {
	a.out[i] = Allocation{Addr: netip.PrefixFrom(addr, r.Subnet.Bits()), Gateway: r.Gateway, Set: i}
	a.done[i] = true
}

func (a *allocator) reserve(i int, addr netip.Addr, r Range) error {
	err := a.tx.Reserve(store.Reservation{
		Addr: addr, ContainerID: a.req.ContainerID, IfName: a.req.IfName, Pod: a.req.Pod, Subnet: r.Subnet,
	})
	if err != nil {
		return err
	}
	a.set(i, addr, r)
	return nil
}

func (a *allocator) requested(want netip.Addr) error {
	i, r, ok := a.find(want)
	if !ok {
		var all []string
		for _, set := range a.req.Sets {
			all = append(all, set.String())
		}
		return cniplug.Errorf(types.ErrInvalidNetworkConfig, "network %q: requested address %s is outside every range (%s): request an address inside one, or widen the ranges", a.network, want, strings.Join(all, "; "))
	}
	if a.taken[want] {
		return cniplug.Errorf(types.ErrInvalidNetworkConfig, "network %q: requested address %s is held by another container in the reference host-local's records on this node: request another address, or DEL that container first", a.network, want)
	}
	if a.excluded[want] {
		return cniplug.Errorf(types.ErrInvalidNetworkConfig, "network %q: requested address %s is a gateway, which is never handed out: request another address", a.network, want)
	}
	if a.done[i] {
		have := a.out[i].Addr.Addr()
		switch {
		case have == want:
			return nil
		case a.held[i]:
			return cniplug.Errorf(types.ErrInvalidNetworkConfig, "network %q: container %s interface %s already holds %s in range set %s, so it cannot also get the requested %s: DEL it first to change its address", a.network, a.req.ContainerID, a.req.IfName, have, a.req.Sets[i], want)
		default:
			return cniplug.Errorf(types.ErrInvalidNetworkConfig, "network %q: requested addresses %s and %s are both in range set %s, which gives one address per attachment: request one per range set", a.network, have, want, a.req.Sets[i])
		}
	}
	err := a.reserve(i, want, r)
	if errors.Is(err, store.ErrTaken) {
		holder, _ := a.tx.Get(want)
		pod := ""
		if holder.Pod != "" {
			pod = " (pod " + holder.Pod + ")"
		}
		return cniplug.Errorf(types.ErrInvalidNetworkConfig, "network %q: requested address %s is held by container %s interface %s%s: request another address, or release it (DEL of that container, or cnibox gc)", a.network, want, holder.ContainerID, holder.IfName, pod)
	}
	return err
}

// segment is an interval of addresses to search, [from, to].
type segment struct {
	from, to netip.Addr
	r        Range
}

// cursorKey names the round-robin cursor of set i in the store.
func (a *allocator) cursorKey(i int) string {
	if i < len(a.req.Cursors) && a.req.Cursors[i] != "" {
		return a.req.Cursors[i]
	}
	return a.req.Sets[i].ID()
}

// next finds the first free address after the set's cursor (stored under
// key), wrapping around the set's ranges, skipping gateways. A cursor that
// lies outside the set's ranges (pools whose addresses changed) continues
// at the lowest range above it.
func (a *allocator) next(set RangeSet, key string) (netip.Addr, Range, bool) {
	var segs []segment
	cur, ok := a.tx.Cursor(key)
	k := -1
	if ok {
		for i, r := range set {
			if r.Contains(cur) {
				k = i
				break
			}
		}
	}
	from := 0 // the range to start at when the cursor is in none
	if ok && k < 0 {
		from = max(rangeAbove(set, cur), 0)
	}
	if k < 0 {
		for j := range set {
			r := set[(from+j)%len(set)]
			segs = append(segs, segment{r.Start, r.End, r})
		}
	} else {
		if n := cur.Next(); n.IsValid() && set[k].Contains(n) {
			segs = append(segs, segment{n, set[k].End, set[k]})
		}
		for j := 1; j < len(set); j++ {
			r := set[(k+j)%len(set)]
			segs = append(segs, segment{r.Start, r.End, r})
		}
		segs = append(segs, segment{set[k].Start, cur, set[k]})
	}
	for _, s := range segs {
		if addr, ok := a.firstFree(s.from, s.to); ok {
			return addr, s.r, true
		}
	}
	return netip.Addr{}, Range{}, false
}

// rangeAbove returns the index of the range of set with the lowest start
// above cur, or -1.
func rangeAbove(set RangeSet, cur netip.Addr) int {
	j := -1
	for i, r := range set {
		if r.Start.BitLen() == cur.BitLen() && cur.Less(r.Start) && (j < 0 || r.Start.Less(set[j].Start)) {
			j = i
		}
	}
	return j
}

// firstFree returns the first address in [from, to] that is neither reserved
// nor excluded. Each step is one index seek; there are at most as many steps
// as excluded addresses in the interval, plus one.
func (a *allocator) firstFree(from, to netip.Addr) (netip.Addr, bool) {
	for {
		addr, ok := a.tx.NextFree(from, to)
		if !ok {
			return netip.Addr{}, false
		}
		if !a.excluded[addr] {
			return addr, true
		}
		from = addr.Next()
		if !from.IsValid() || to.Less(from) {
			return netip.Addr{}, false
		}
	}
}

func (a *allocator) exhausted(set RangeSet) error {
	u := usage(a.tx, set, a.excluded)
	what := "range"
	if len(set) > 1 {
		what = "ranges"
	}
	return cniplug.Errorf(cniplug.CodePoolExhausted, "network %q: no free address in %s %s (%d of %d in use); release addresses (cnibox gc) or widen the %s",
		a.network, what, set, u.Used, u.Capacity, what)
}
