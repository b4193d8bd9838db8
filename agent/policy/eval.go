package policy

import "net/netip"

// Conn is the first packet of a connection.
type Conn struct {
	Src, Dst netip.Addr
	Proto    Protocol
	Port     uint16 // destination port
}

// Verdict is the model's decision on a connection in one direction, and the
// rule that made it ("" when no rule did: the default or the NetworkPolicy
// tier's isolation).
type Verdict struct {
	Allowed bool
	Rule    string
}

// Evaluate decides c in direction dir as the nftables rules must: for
// Ingress at its destination (a pod of this node), for Egress at its
// source. It is the model's semantics written once, for the tests and for
// a person asking why; it is not on any packet's path.
//
// Per direction: for ingress, the node's own addresses are allowed; the Admin tier's policies that select the pod, by
// priority, each rule in order (Accept and Deny decide, Pass goes to the
// NetworkPolicy tier); then, if a NetworkPolicy isolates the pod, one of
// their rules must allow it or it is dropped; then the Baseline tier as the
// Admin tier (Pass goes to the default); then the default: allowed.
func (m *Model) Evaluate(dir Direction, c Conn) Verdict {
	self := c.Dst
	if dir == Egress {
		self = c.Src
	}
	if dir == Ingress && m.in(m.NodeAddrs, c.Src) {
		return Verdict{Allowed: true, Rule: "node"}
	}
	t := m.Tiers(dir)
	if v, done := m.tier(t.Admin, dir, self, c); done {
		return v
	}
	if m.in(t.Isolated, self) {
		for _, p := range t.NetworkPolicy {
			if !m.in(p.Subject, self) {
				continue
			}
			for _, r := range p.Rules {
				if m.matches(&r, dir, c) {
					return Verdict{Allowed: true, Rule: r.ID}
				}
			}
		}
		return Verdict{}
	}
	if v, done := m.tier(t.Baseline, dir, self, c); done {
		return v
	}
	return Verdict{Allowed: true}
}

// tier evaluates an Admin or Baseline tier; done is false when no rule
// decided (none matched, or a Pass).
func (m *Model) tier(ps []*Policy, dir Direction, self netip.Addr, c Conn) (Verdict, bool) {
	for _, p := range ps {
		if !m.in(p.Subject, self) {
			continue
		}
		for _, r := range p.Rules {
			if !m.matches(&r, dir, c) {
				continue
			}
			switch r.Action {
			case Pass:
				return Verdict{}, false
			case Deny:
				return Verdict{Rule: r.ID}, true
			default:
				return Verdict{Allowed: true, Rule: r.ID}, true
			}
		}
	}
	return Verdict{}, false
}

// matches reports whether one of r's clauses matches c.
func (m *Model) matches(r *Rule, dir Direction, c Conn) bool {
	peer := c.Src
	if dir == Egress {
		peer = c.Dst
	}
	for _, cl := range r.Clauses {
		if cl.Peer != "" && !m.in(cl.Peer, peer) {
			continue
		}
		if cl.Ports != nil && !portIn(cl.Ports, c) {
			continue
		}
		if cl.DstPorts != "" {
			s := m.Sets[cl.DstPorts]
			if s == nil || !s.Has(Elem{Prefix: hostPrefix(c.Dst), Proto: c.Proto, Port: c.Port}) {
				continue
			}
		}
		return true
	}
	return false
}

func portIn(rs []PortRange, c Conn) bool {
	for _, r := range rs {
		if r.Proto == c.Proto && c.Port >= r.First && c.Port <= r.Last {
			return true
		}
	}
	return false
}

// in reports whether a is in the address or prefix set id.
func (m *Model) in(id SetID, a netip.Addr) bool {
	s := m.Sets[id]
	if s == nil {
		return false
	}
	if s.Kind != CIDRs {
		return s.Has(Elem{Prefix: hostPrefix(a)})
	}
	for e := range s.n {
		if e.Prefix.Contains(a) {
			return true
		}
	}
	return false
}
