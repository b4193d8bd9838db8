package addrhold

import (
	"time"
)

// Timing are the election's durations (docs/egress.md, "The bound").
type Timing struct {
	// Lease is the Lease's duration: another node takes an address whose
	// Lease record has not changed for this long (its own clock).
	Lease time.Duration
	// Renew is the time between a holder's renewals.
	Renew time.Duration
	// Margin is how long before another node could take the Lease the
	// holder must have dropped the address: the time to remove it and
	// what the two clocks' rates may differ by.
	Margin time.Duration
	// Lifetime is the valid lifetime the holder gives the address in the
	// kernel (whole seconds); Late is how long after it runs out the
	// kernel may remove the address (its lifetime timer's slack).
	Lifetime, Late time.Duration
	// RankDelay is how much later than the first the n-th eligible node
	// (by rendezvous rank) tries to take a free address.
	RankDelay time.Duration
	// Ineligible is how long a Lease held by a node that may not hold its
	// address (the gateway's nodeSelector or the node's networks leave it
	// out) stands before an eligible node takes it, however often it is
	// renewed: the holder, if it is an agent that saw the change, released
	// it long before; one that renews all the same (a stolen token) is
	// overruled. Meanwhile no node sends through it (Holder).
	Ineligible time.Duration
}

// DefaultTiming is the agent's: a dead holder's address leaves from its
// successor about 2 s (at most 2.4 s) after its last renewal.
var DefaultTiming = Timing{Lease: 2 * time.Second, Renew: 400 * time.Millisecond, Margin: 200 * time.Millisecond,
	Lifetime: time.Second, Late: 250 * time.Millisecond, RankDelay: 200 * time.Millisecond, Ineligible: 10 * time.Second}

// Record is a Lease as the election reads it.
type Record struct {
	Exists  bool
	Holder  string // "" released
	Version string // its resourceVersion: a renewal changes it
}

// Action is what a claim asks of the caller.
type Action int

const (
	// Wait: nothing to do.
	Wait Action = iota
	// Take the Lease (write this node as its holder).
	Take
	// Renew the Lease this node holds.
	Renew
	// Release: drop the address, then write the Lease without a holder.
	Release
)

func (a Action) String() string {
	return [...]string{"wait", "take", "renew", "release"}[a]
}

// Claim is one node's view of one address's Lease: what it last saw of
// the record, and whether and since when it holds it. Not safe for
// concurrent use.
type Claim struct {
	T    Timing
	Self string

	seen   string    // the version last seen
	seenAt time.Time // when that version was first seen (local clock)
	sent   time.Time // when the last successful take or renewal was sent; zero: not held
	// badSince is when another node that may not hold the address was
	// first seen holding its Lease (zero: no such holder).
	badHolder string
	badSince  time.Time
}

// observe notes r at now.
func (c *Claim) observe(r Record, now time.Time) {
	v := r.Version
	if !r.Exists {
		v = "absent"
	}
	if v != c.seen || c.seenAt.IsZero() {
		c.seen, c.seenAt = v, now
	}
}

// observeHolder notes whether r's holder, another node, may hold the
// address (holderOK) at now.
func (c *Claim) observeHolder(r Record, now time.Time, holderOK bool) {
	switch {
	case holderOK || !r.Exists || r.Holder == "" || r.Holder == c.Self:
		c.badHolder, c.badSince = "", time.Time{}
	case r.Holder != c.badHolder:
		c.badHolder, c.badSince = r.Holder, now
	}
}

// freeAt is when r is, or will be, free for the taking: at once for an
// absent or released record (since it was first seen so), else once it
// has not changed for the Lease's duration, or once its holder has been
// one that may not hold it for T.Ineligible.
func (c *Claim) freeAt(r Record) time.Time {
	if !r.Exists || r.Holder == "" {
		return c.seenAt
	}
	free := c.seenAt.Add(c.T.Lease)
	if !c.badSince.IsZero() && c.T.Ineligible > 0 {
		if bad := c.badSince.Add(c.T.Ineligible); bad.Before(free) {
			free = bad
		}
	}
	return free
}

// Next is what to do at now, given the record as last read, whether this
// node may hold the address and its rank among those that may, and
// whether the record's holder (if another node) may hold it.
func (c *Claim) Next(r Record, now time.Time, eligible bool, rank int, holderOK bool) Action {
	c.observe(r, now)
	c.observeHolder(r, now, holderOK)
	mine := r.Exists && r.Holder == c.Self
	switch {
	case mine && !eligible:
		return Release
	case mine && (c.sent.IsZero() || now.Sub(c.sent) >= c.T.Renew):
		// (zero: this node's agent restarted while the node held it)
		return Renew
	case mine:
		return Wait
	}
	c.sent = time.Time{} // another node's, or nobody's
	if eligible && !now.Before(c.freeAt(r).Add(time.Duration(rank)*c.T.RankDelay)) {
		return Take
	}
	return Wait
}

// Done records that a Take or Renew sent at sent was accepted.
func (c *Claim) Done(sent time.Time) { c.sent = sent }

// Lost records that the Lease is no longer this node's (released, or a
// write refused).
func (c *Claim) Lost() { c.sent = time.Time{} }

// Holding reports whether the node may keep the address at now: its last
// accepted renewal was sent less than the Lease's duration less the
// margin ago.
func (c *Claim) Holding(now time.Time) bool {
	return !c.sent.IsZero() && now.Before(c.sent.Add(c.T.Lease-c.T.Margin))
}

// MayRefresh reports whether the address's kernel lifetime may be renewed
// at now: a lifetime renewed now ends (kernel slack included) before the
// margin before any other node could take the Lease. A holder whose agent
// dies loses the address to the kernel in time; one whose renewals are
// late lets it lapse and adds it again after the next renewal.
func (c *Claim) MayRefresh(now time.Time) bool {
	return !c.sent.IsZero() && !now.Add(c.T.Lifetime+c.T.Late+c.T.Margin).After(c.sent.Add(c.T.Lease))
}

// Sent is when the last accepted take or renewal was sent (zero: not
// held).
func (c *Claim) Sent() time.Time { return c.sent }

// SeenAt is when the version of the Lease last seen was first seen (this
// node's clock): the start of the wait of a node that takes it over.
func (c *Claim) SeenAt() time.Time { return c.seenAt }

// Deadline is when Holding turns false (zero when not held).
func (c *Claim) Deadline() time.Time {
	if c.sent.IsZero() {
		return time.Time{}
	}
	return c.sent.Add(c.T.Lease - c.T.Margin)
}

// Holder is who holds the address at now as this node sees it: this node
// while Holding, another node that may hold it (holderOK) while its record
// is fresh (not yet free for the taking), else "": no pod's traffic goes
// to a node the gateway does not make eligible, whatever its Lease says.
func (c *Claim) Holder(r Record, now time.Time, holderOK bool) string {
	c.observe(r, now)
	c.observeHolder(r, now, holderOK)
	switch {
	case c.Holding(now):
		return c.Self
	case !r.Exists || r.Holder == "" || r.Holder == c.Self || !holderOK:
		return ""
	case now.Before(c.freeAt(r)):
		return r.Holder
	}
	return ""
}
