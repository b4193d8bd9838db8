package clusteripam

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"

	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/internal/wbpool"
)

// maxAttempts bounds the read-change-write rounds of one pool write
// (whereabouts' DatastoreRetries is 100).
const maxAttempts = 100

// Allocator hands out and releases addresses of the pools in a Backend.
// The changes of one pool on this node are written by one writer at a
// time, in batches (batch.go), so the agent's own calls do not conflict
// with each other; other writers (other nodes, whereabouts) are met by
// optimistic concurrency.
type Allocator struct {
	B    Backend
	Node string // this node's name (node slices)
	// DataDir is the node's store directory, where node slices' changes
	// wait for their write ("": in memory only).
	DataDir string

	Log *slog.Logger

	// DefaultSlice is the node slice size of the networks that name no
	// node_slice_size (--cluster-ipam-node-slice-size; zero: off). See
	// defaultSlice for where it applies.
	DefaultSlice SliceDefault

	mu      sync.Mutex // batches, and local's map
	slice   sliceCache
	local   map[string]*localPool // node slices' pools (local.go)
	batches map[string]*batch     // reservations waiting for a pool's write

	plainNoted sync.Map // networks the default leaves plain, logged once
}

// target is one range of a request as the allocator works on it: the pool
// object's name and range, and the bounds to allocate within.
type target struct {
	pool      string
	poolRange string // IPPool.spec.range
	r         wbpool.Range
	mask      int  // prefix length of the result
	local     bool // this node's slice: allocated in memory, written behind
	// plain is the range's plain pool when the slice is the agent's
	// default (DefaultSlice): the addresses it holds are not handed out in
	// the slice, and the attachments it holds are released there
	// (local.go's plainHeld).
	plain *target
}

// targets resolves the request's ranges to pools for op (an agentapi
// OpIPAM*): one IPPool per range, or, with node slices, the pool of this
// node's slice. A node that has no slice and finds none free holds nothing
// in a slice: under the agent's default, DEL and CHECK look in the plain
// pool (an address of before the default); DEL skips a range of the
// network's own node_slice_size.
func (al *Allocator) targets(ctx context.Context, req *agentapi.IPAMRequest, op string) ([]target, error) {
	out := make([]target, 0, len(req.Ranges))
	for i, ar := range req.Ranges {
		r, err := parseRange(ar)
		if err != nil {
			return nil, badRequest("ranges[%d]: %v", i, err)
		}
		t := target{pool: wbpool.PoolName(r.Prefix.String(), req.NetworkName, ""), poolRange: r.Prefix.String(), r: r, mask: r.Prefix.Bits()}
		size, implicit := req.NodeSliceSize, false
		if size == "" {
			size, implicit = al.defaultSlice(req, r), true
		}
		if size != "" {
			slice, err := al.nodeSlice(ctx, req, r.Prefix, size, implicit)
			var ae *agentapi.Error
			if errors.As(err, &ae) && ae.Reason == agentapi.ReasonExhausted {
				if implicit && (op == agentapi.OpIPAMDel || op == agentapi.OpIPAMCheck) {
					out = append(out, t)
					continue
				}
				if op == agentapi.OpIPAMDel {
					continue
				}
			}
			if err != nil {
				return nil, err
			}
			if slice.IsValid() {
				plain := t
				// As whereabouts: the slice's usable addresses, the whole
				// range's prefix length in the result.
				t.pool = wbpool.PoolName(slice.String(), req.NetworkName, al.Node)
				t.poolRange = slice.String()
				t.r = wbpool.Range{Prefix: slice, Exclude: r.Exclude}
				t.local = true
				if implicit {
					t.plain = &plain
				}
			}
		}
		out = append(out, t)
	}
	return out, nil
}

func parseRange(ar agentapi.IPAMRange) (wbpool.Range, error) {
	var r wbpool.Range
	p, err := netip.ParsePrefix(ar.Range)
	if err != nil {
		return r, err
	}
	r.Prefix = p.Masked()
	if ar.Start != "" {
		if r.Start, err = netip.ParseAddr(ar.Start); err != nil {
			return r, err
		}
	}
	if ar.End != "" {
		if r.End, err = netip.ParseAddr(ar.End); err != nil {
			return r, err
		}
	}
	for _, x := range ar.Exclude {
		px, err := wbpool.ParseExclude(x)
		if err != nil {
			return r, err
		}
		r.Exclude = append(r.Exclude, px)
	}
	return r, nil
}

// Add reserves an address of every range for the attachment; on failure it
// releases what it reserved before it returns.
func (al *Allocator) Add(ctx context.Context, req *agentapi.IPAMRequest) ([]string, error) {
	ts, err := al.targets(ctx, req, agentapi.OpIPAMAdd)
	if err != nil {
		return nil, err
	}
	var want []netip.Addr
	for _, s := range req.Requested {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, badRequest("requested address %q: %v", s, err)
		}
		want = append(want, a.Unmap())
	}
	var ips []string
	for i, t := range ts {
		var asked netip.Addr
		for _, a := range want {
			if t.r.Prefix.Contains(a) {
				asked = a
			}
		}
		reserve := al.reserve
		if t.local {
			reserve = al.reserveLocal
		}
		ip, err := reserve(ctx, t, req, asked)
		if err != nil {
			for _, done := range ts[:i] {
				if rerr := al.release(ctx, done, req); rerr != nil {
					err = fmt.Errorf("%w (and undoing the reservation in %s failed: %v)", err, done.pool, rerr)
				}
			}
			return nil, err
		}
		ips = append(ips, netip.PrefixFrom(ip, t.mask).String())
	}
	return ips, nil
}

// Del releases the attachment's addresses of every range.
func (al *Allocator) Del(ctx context.Context, req *agentapi.IPAMRequest) error {
	ts, err := al.targets(ctx, req, agentapi.OpIPAMDel)
	if err != nil {
		return err
	}
	var errs []error
	for _, t := range ts {
		errs = append(errs, al.release(ctx, t, req))
	}
	return errors.Join(errs...)
}

// Check returns the attachment's addresses; an attachment without one in
// some range is an error.
func (al *Allocator) Check(ctx context.Context, req *agentapi.IPAMRequest) ([]string, error) {
	ts, err := al.targets(ctx, req, agentapi.OpIPAMCheck)
	if err != nil {
		return nil, err
	}
	var ips []string
	for _, t := range ts {
		var p *Pool
		if t.local {
			lp, lerr := al.localFor(ctx, t)
			if lerr == nil {
				lp.mu.Lock()
				p = lp.ours.clone()
				lp.mu.Unlock()
			}
			err = lerr
		} else {
			p, err = al.B.GetPool(ctx, t.pool, true)
		}
		if err != nil {
			return nil, apiErr(err, "IPPool %s", t.pool)
		}
		off, ok := find(p, req)
		if !ok && t.plain != nil {
			// An attachment of before the default sliced the range.
			pp, perr := al.cachedPool(ctx, t.plain.pool)
			if perr != nil {
				return nil, apiErr(perr, "IPPool %s", t.plain.pool)
			}
			if pp != nil {
				if poff, pok := find(pp, req); pok {
					p, off, ok = pp, poff, true
				}
			}
		}
		if !ok {
			return nil, &agentapi.Error{Reason: agentapi.ReasonNotFound, Msg: fmt.Sprintf("IPPool %s holds no address for container %s interface %s", t.pool, req.ContainerID, req.IfName)}
		}
		base, _, err := wbpool.ParsePoolRange(p.Range)
		if err != nil {
			return nil, err
		}
		a, _ := wbpool.AddrAt(base, off)
		ips = append(ips, netip.PrefixFrom(a, t.mask).String())
	}
	return ips, nil
}

// find returns the offset the attachment holds in p: by container ID and
// interface, as whereabouts releases.
func find(p *Pool, req *agentapi.IPAMRequest) (string, bool) {
	for off, a := range p.Allocations {
		if a.ContainerID == req.ContainerID && a.IfName == req.IfName {
			return off, true
		}
	}
	return "", false
}

// reserve writes one allocation into the target's pool and returns its
// address: the one the pod already holds (same podref and interface, as
// whereabouts), else the one asked for, else the one the pod held last
// (sticky), else the lowest free one.
func (al *Allocator) reserve(ctx context.Context, t target, req *agentapi.IPAMRequest, asked netip.Addr) (netip.Addr, error) {
	elsewhere := map[netip.Addr]bool{} // reserved by another pod in another range
	for {
		c, err := al.commit(ctx, &op{t: t, req: req, asked: asked, elsewhere: elsewhere})
		if err != nil {
			return netip.Addr{}, err
		}
		// The pool first, then the reservation, in whereabouts' order: two
		// writers of one pool meet at the pool's resourceVersion, and a
		// reservation only ever separates pools of overlapping ranges.
		if !req.Overlapping || c.existing {
			return c.ip, nil
		}
		ok, err := al.claim(ctx, c.ip, req)
		if err == nil && ok {
			return c.ip, nil
		}
		// Undo: the address is another pod's in an overlapping range (or
		// the API failed). The release is written even if ctx ends first.
		if _, uerr := al.commit(ctx, &op{t: t, release: true, req: req}); uerr != nil && err == nil {
			err = uerr
		}
		if err != nil {
			return netip.Addr{}, err
		}
		elsewhere[c.ip] = true
	}
}

// choose picks the address (see reserve); existing says the attachment
// holds it already.
func choose(t target, p *Pool, base netip.Addr, taken map[netip.Addr]wbpool.Allocation, elsewhere map[netip.Addr]bool, req *agentapi.IPAMRequest, asked netip.Addr) (netip.Addr, bool, error) {
	for ip, a := range taken {
		if (req.PodRef != "" && a.PodRef == req.PodRef && a.IfName == req.IfName) ||
			(a.ContainerID == req.ContainerID && a.IfName == req.IfName) {
			return ip, true, nil
		}
	}
	if asked.IsValid() {
		if a, ok := taken[asked]; ok {
			return netip.Addr{}, false, &agentapi.Error{Reason: agentapi.ReasonConflict, Msg: fmt.Sprintf("the requested address %s is held by pod %q (container %s) in IPPool %s: ask for a free one", asked, a.PodRef, a.ContainerID, t.pool)}
		}
		if elsewhere[asked] {
			return netip.Addr{}, false, &agentapi.Error{Reason: agentapi.ReasonConflict, Msg: fmt.Sprintf("the requested address %s is reserved by another pod in an overlapping range (OverlappingRangeIPReservation %s)", asked, wbpool.ReservationName(asked, req.NetworkName))}
		}
		if !t.r.Usable(asked) {
			return netip.Addr{}, false, &agentapi.Error{Reason: agentapi.ReasonConflict, Msg: fmt.Sprintf("the requested address %s is outside the addresses IPPool %s hands out", asked, t.pool)}
		}
		return asked, false, nil
	}
	busy := func(a netip.Addr) bool { _, ok := taken[a]; return ok || elsewhere[a] }
	if req.Sticky && req.PodRef != "" {
		me := req.PodRef + "/" + req.IfName
		for off, who := range p.Sticky {
			if who != me {
				continue
			}
			if ip, ok := wbpool.AddrAt(base, off); ok && !busy(ip) && t.r.Usable(ip) {
				return ip, false, nil
			}
		}
	}
	// The lowest free address no other pod held last, else the lowest
	// free one.
	remembered := map[netip.Addr]bool{}
	if req.Sticky {
		for off := range p.Sticky {
			if ip, ok := wbpool.AddrAt(base, off); ok {
				remembered[ip] = true
			}
		}
	}
	if ip, ok := t.r.Lowest(func(a netip.Addr) bool { return busy(a) || remembered[a] }); ok {
		return ip, false, nil
	}
	if ip, ok := t.r.Lowest(busy); ok {
		return ip, false, nil
	}
	first, last, _ := t.r.Bounds()
	return netip.Addr{}, false, &agentapi.Error{Reason: agentapi.ReasonExhausted, Msg: fmt.Sprintf("IPPool %s: every address of %s-%s is taken (%d allocations): release addresses or widen the range", t.pool, first, last, len(p.Allocations))}
}

// claim creates the OverlappingRangeIPReservation of ip for the pod; false
// when another pod holds it.
func (al *Allocator) claim(ctx context.Context, ip netip.Addr, req *agentapi.IPAMRequest) (bool, error) {
	name := wbpool.ReservationName(ip, req.NetworkName)
	err := al.B.CreateReservation(ctx, name, Reservation{ContainerID: req.ContainerID, PodRef: req.PodRef, IfName: req.IfName})
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, ErrExists) {
		return false, apiErr(err, "create OverlappingRangeIPReservation %s", name)
	}
	r, err := al.B.GetReservation(ctx, name)
	if errors.Is(err, ErrNotFound) {
		return al.claim(ctx, ip, req)
	}
	if err != nil {
		return false, apiErr(err, "read OverlappingRangeIPReservation %s", name)
	}
	return (req.PodRef != "" && r.PodRef == req.PodRef) || (r.ContainerID == req.ContainerID && r.IfName == req.IfName), nil
}

// pool reads the target's pool (from the cache unless fresh), creating it
// when missing.
func (al *Allocator) pool(ctx context.Context, t target, fresh bool) (*Pool, error) {
	p, err := al.B.GetPool(ctx, t.pool, fresh)
	if errors.Is(err, ErrNotFound) {
		err = al.B.CreatePool(ctx, &Pool{Name: t.pool, Range: t.poolRange, Allocations: map[string]wbpool.Allocation{}})
		if err != nil && !errors.Is(err, ErrExists) {
			return nil, apiErr(err, "create IPPool %s", t.pool)
		}
		p, err = al.B.GetPool(ctx, t.pool, true)
	}
	if err != nil {
		return nil, apiErr(err, "read IPPool %s", t.pool)
	}
	return p, nil
}

// release removes the attachment's allocation from the target's pool (and
// its OverlappingRangeIPReservation); nothing to release is success. The
// released offset is remembered for the pod (sticky).
func (al *Allocator) release(ctx context.Context, t target, req *agentapi.IPAMRequest) error {
	if t.local {
		return al.releaseLocal(ctx, t, req)
	}
	o, err := al.commit(ctx, &op{t: t, release: true, req: req})
	if err != nil {
		return err
	}
	if req.Overlapping && o.found && o.ip.IsValid() {
		al.unclaim(ctx, o.ip, req.NetworkName, o.alloc)
	}
	return nil
}

// unclaim deletes ip's OverlappingRangeIPReservation if it is a's.
func (al *Allocator) unclaim(ctx context.Context, ip netip.Addr, networkName string, a wbpool.Allocation) {
	name := wbpool.ReservationName(ip, networkName)
	r, err := al.B.GetReservation(ctx, name)
	if err != nil || r.PodRef != a.PodRef {
		return
	}
	_ = al.B.DeleteReservation(ctx, name)
}

// maxSticky bounds the remembered holders of a pool (an annotation of at
// most a few tens of KiB).
const maxSticky = 1024

// remember notes that who held off last.
func remember(p *Pool, off, who string) {
	for k, v := range p.Sticky {
		if v == who {
			delete(p.Sticky, k)
		}
	}
	if len(p.Sticky) >= maxSticky {
		for k := range p.Sticky { // forget one at random
			delete(p.Sticky, k)
			break
		}
	}
	p.Sticky[off] = who
}

// badRequest is a malformed request.
func badRequest(format string, args ...any) error {
	return &agentapi.Error{Reason: agentapi.ReasonBadRequest, Msg: fmt.Sprintf(format, args...)}
}

// apiErr says what failed; a backend failure other than the ones the
// allocator handles means the API (or etcd) is unavailable.
func apiErr(err error, format string, args ...any) error {
	var ae *agentapi.Error
	if errors.As(err, &ae) {
		return err
	}
	return &agentapi.Error{Reason: agentapi.ReasonUnavailable, Msg: fmt.Sprintf(format, args...) + ": " + err.Error()}
}
