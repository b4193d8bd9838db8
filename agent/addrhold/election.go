//go:build !nokube

package addrhold

import (
	"context"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/tools/cache"
)

// Election is one node's part in the election of every address of one
// Kind: its claims, the newest record seen of each Lease, the writes in
// flight. Owned by its caller's loop goroutine: Step, Read, Done and
// Shutdown are called from there; the writes run on goroutines of their
// own and report on Results.
type Election struct {
	cfg      Config
	claims   map[netip.Addr]*Claim
	recs     map[netip.Addr]*coordv1.Lease
	inflight map[netip.Addr]bool
	results  chan Result
}

// Config configures an Election.
type Config struct {
	T      Timing
	Leases *Leases // (Leases.Node is this node)
	Fence  *Fence
	Log    *slog.Logger
	// What starts the log lines ("egress gateways", "load balancers").
	What string
	// OnTake, if set, is told of each address this node took over from
	// another holder, whose record last changed at lastSeen (this node's
	// clock); OnFailure of each failed write (not a conflict).
	OnTake    func(ip netip.Addr, from string, lastSeen time.Time)
	OnFailure func()
}

// Result is a Lease write's outcome.
type Result struct {
	ip     netip.Addr
	action Action
	sent   time.Time
	lease  *coordv1.Lease // as written; nil on error
	err    error
	// from: the holder the Lease had before a Take ("" none), whose
	// record last changed at lastSeen (this node's clock).
	from     string
	lastSeen time.Time
}

// NewElection returns an election with no claims yet.
func NewElection(cfg Config) *Election {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Election{cfg: cfg, claims: map[netip.Addr]*Claim{}, recs: map[netip.Addr]*coordv1.Lease{},
		inflight: map[netip.Addr]bool{}, results: make(chan Result, 16)}
}

// Results carries the writes' outcomes: hand each to Done.
func (e *Election) Results() <-chan Result { return e.results }

// Claim is ip's claim (made when there is none).
func (e *Election) Claim(ip netip.Addr) *Claim {
	cl := e.claims[ip]
	if cl == nil {
		cl = &Claim{T: e.cfg.T, Self: e.cfg.Leases.Node}
		e.claims[ip] = cl
	}
	return cl
}

// Record is ip's Lease as last seen (nil: none).
func (e *Election) Record(ip netip.Addr) *coordv1.Lease { return e.recs[ip] }

// Read takes the newest of each Lease of the Kind from an informer's
// store.
func (e *Election) Read(st cache.Store) {
	seen := map[netip.Addr]bool{}
	for _, o := range st.List() {
		l, ok := o.(*coordv1.Lease)
		if !ok {
			continue
		}
		ip, ok := e.cfg.Leases.Kind.Addr(l)
		if !ok || l.Name != e.cfg.Leases.Kind.Name(ip) {
			// (a Lease of another name that says it is this address's is
			// no one's: an agent may write Leases of the prefix with
			// itself as the holder, not another address's)
			continue
		}
		seen[ip] = true
		if old := e.recs[ip]; old == nil || old.ResourceVersion == l.ResourceVersion || Newer(l.ResourceVersion, old.ResourceVersion) {
			e.recs[ip] = l
		}
	}
	for ip := range e.recs {
		if !seen[ip] && !e.inflight[ip] {
			delete(e.recs, ip) // deleted (an administrator's hand)
		}
	}
}

// Step takes part, at now, in the election of every address of
// candidates, which lists for each the nodes that may hold it in rank
// order (this node takes a free address after those before it; none: no
// node may), writes what is due, releases the addresses it holds that
// candidates no longer names, fences the kernel, and returns who holds
// each address as this node sees it (Claim.Holder; none left out).
func (e *Election) Step(ctx context.Context, now time.Time, candidates map[netip.Addr][]string) map[netip.Addr]string {
	self := e.cfg.Leases.Node
	holders := map[netip.Addr]string{}
	for _, ip := range slices.SortedFunc(maps.Keys(candidates), netip.Addr.Compare) {
		nodes := candidates[ip]
		cl := e.Claim(ip)
		rec := ReadRecord(e.recs[ip])
		rank := slices.Index(nodes, self)
		eligible := rank >= 0
		if h := rec.Holder; h != "" && h != self {
			// The holder whose Lease runs out is no candidate: the
			// node after it goes first.
			if i := slices.Index(nodes, h); i >= 0 && i < rank {
				rank--
			}
		}
		// a Lease held by a node that may not hold the address is no
		// one's to this node (claim.go, T.Ineligible)
		holderOK := rec.Holder == "" || rec.Holder == self || slices.Contains(nodes, rec.Holder)
		if a := cl.Next(rec, now, eligible, max(rank, 0), holderOK); a != Wait && !e.inflight[ip] {
			e.write(ctx, ip, a, now)
		}
		if h := cl.Holder(rec, now, holderOK); h != "" {
			holders[ip] = h
		}
	}
	// Addresses no longer named: release those held.
	for ip, cl := range e.claims {
		if _, named := candidates[ip]; named {
			continue
		}
		if ReadRecord(e.recs[ip]).Holder == self && cl.Holding(now) && !e.inflight[ip] {
			e.write(ctx, ip, Release, now)
		} else if !cl.Holding(now) && !e.inflight[ip] {
			delete(e.claims, ip)
		}
	}
	e.cfg.Fence.Sync(now, e.claims)
	return holders
}

// write sends a Take, Renew or Release of ip's Lease on its own
// goroutine; a Release drops the address first.
func (e *Election) write(ctx context.Context, ip netip.Addr, a Action, now time.Time) {
	if a == Release {
		e.claims[ip].Lost()
		e.cfg.Fence.Sync(now, e.claims)
	}
	e.inflight[ip] = true
	prev := e.recs[ip]
	from, lastSeen := ReadRecord(prev).Holder, e.claims[ip].SeenAt()
	go func() {
		wctx, cancel := context.WithTimeout(ctx, e.cfg.T.Lease)
		defer cancel()
		sent := time.Now()
		l, err := e.cfg.Leases.Write(wctx, ip, prev, a != Release)
		e.results <- Result{ip: ip, action: a, sent: sent, lease: l, err: err, from: from, lastSeen: lastSeen}
	}()
}

// Done takes a write's result.
func (e *Election) Done(r Result) {
	delete(e.inflight, r.ip)
	cl := e.Claim(r.ip)
	if r.err != nil {
		if r.action != Release {
			cl.Lost()
		}
		if !Stale(r.err) {
			if e.cfg.OnFailure != nil {
				e.cfg.OnFailure()
			}
			e.cfg.Log.Warn(e.cfg.What+": cannot write the Lease of an address", "ip", r.ip, "action", r.action.String(), "err", r.err)
		}
		return
	}
	e.recs[r.ip] = r.lease
	if r.action == Release {
		cl.Lost()
		e.cfg.Log.Info(e.cfg.What+": released an address", "ip", r.ip)
		return
	}
	if r.action == Take {
		e.cfg.Log.Info(e.cfg.What+": holding an address", "ip", r.ip, "uplink", e.cfg.Fence.Link, "from", r.from)
		if r.from != "" && r.from != e.cfg.Leases.Node && e.cfg.OnTake != nil {
			e.cfg.OnTake(r.ip, r.from, r.lastSeen)
		}
	}
	cl.Done(r.sent)
	e.cfg.Fence.Sync(time.Now(), e.claims)
}

// Shutdown releases what this node holds: the addresses at once, the
// Leases with a last write (best effort, a second at most), so that the
// next holder need not wait for them to expire.
func (e *Election) Shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for ip, cl := range e.claims {
		if !cl.Holding(time.Now()) {
			continue
		}
		cl.Lost()
		e.cfg.Fence.Sync(time.Now(), e.claims)
		if _, err := e.cfg.Leases.Write(ctx, ip, e.recs[ip], false); err != nil {
			e.cfg.Log.Warn(e.cfg.What+": cannot release the Lease of an address on the way out; it expires", "ip", ip, "err", err)
		}
	}
}
