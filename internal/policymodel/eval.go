package policymodel

import "net/netip"

// Conn is the first packet of a connection: what a rule's clauses match.
//
// Each field states its level in a tag. A connection-level field is
// judged once, on the connection's first packet: conntrack carries that
// verdict to the rest of the connection (its replies, and RELATED packets
// such as an ICMP error, carry their master's), so the table may read the
// field from the packet or from the conntrack entry's original tuple. A
// packet-level field would be judged on every packet, before the table's
// shortcut for established connections and in its untracked twins. All of
// Conn's fields are connection-level. What the table judges per packet
// before any rule (INVALID, untracked and RELATED packets, IPv6 link-local
// and neighbour discovery) is not the model's: docs/policy.md says how.
// A field added here must reach Evaluate, the renderer and the trace
// test's model (netops/nft TestPolicyConnFields fails until it does).
type Conn struct {
	Src   netip.Addr `level:"connection"`
	Dst   netip.Addr `level:"connection"`
	Proto Protocol   `level:"connection"`
	Port  uint16     `level:"connection"` // destination port
}

// Verdict is the model's decision on a connection in one direction, and the
// rule that made it: its ID, RuleNode (the node's own traffic), or "" when no
// rule did (allowed: the default; dropped: the NetworkPolicy tier's
// isolation).
type Verdict struct {
	Allowed bool
	Rule    RuleID
}

// Membership answers Evaluate's questions about sets: the model's own
// sets (Model.Evaluate), or the kernel's (`cnibox doctor --policy`).
type Membership interface {
	// Has reports whether set id holds e: an address (Proto 0) in an
	// Addrs set or in a prefix of a CIDRs set, an (address, protocol,
	// port) in a Ported set, or a (pod, destination) pair (Src set) in a
	// Pairs set. A set that does not exist holds nothing.
	Has(id SetID, e Elem) (bool, error)
}

// Evaluate decides c in direction dir as the nftables rules must, with the
// model's own sets: for Ingress at its destination (a pod of this node),
// for Egress at its source. It is the model's semantics written once, for
// the tests and for a person asking why; it is not on any packet's path.
// It decides connections: a packet conntrack leaves untracked is decided
// as the first packet of the connection its own fields make; one
// conntrack calls INVALID belongs to none and is dropped before any rule
// (CounterInvalid; docs/policy.md).
func (m *Model) Evaluate(dir Direction, c Conn) Verdict {
	v, _ := m.Rules.Evaluate(dir, c, modelSets(m.Sets)) // modelSets never fails
	return v
}

// Evaluate decides c in direction dir by r, asking sets which sets hold
// what; the error is sets'.
//
// Per direction: for ingress, the node's own addresses are allowed; the
// Admin tier's policies that select the pod, by priority, each rule in
// order (Accept and Deny decide, Pass goes to the NetworkPolicy tier);
// then, if a NetworkPolicy isolates the pod, one of their rules must allow
// it or it is dropped; then the Baseline tier as the Admin tier (Pass goes
// to the default); then the default: allowed.
func (r *Rules) Evaluate(dir Direction, c Conn, sets Membership) (Verdict, error) {
	e := evaluator{sets: sets, dir: dir, c: c, self: c.Dst, peer: c.Src}
	if dir == Egress {
		e.self, e.peer = c.Src, c.Dst
	}
	if dir == Ingress {
		if ok, err := e.in(r.NodeAddrs, c.Src); err != nil || ok {
			return Verdict{Allowed: true, Rule: RuleNode}, err
		}
	}
	t := r.Tiers(dir)
	if v, done, err := e.tier(t.Admin); err != nil || done {
		return v, err
	}
	if ok, err := e.in(t.Isolated, e.self); err != nil {
		return Verdict{}, err
	} else if ok {
		for _, p := range t.NetworkPolicy {
			if ok, err := e.in(p.Subject, e.self); err != nil || !ok {
				if err != nil {
					return Verdict{}, err
				}
				continue
			}
			for i := range p.Rules {
				if ok, err := e.matches(&p.Rules[i]); err != nil || ok {
					return Verdict{Allowed: ok, Rule: p.Rules[i].ID}, err
				}
			}
		}
		return Verdict{}, nil
	}
	if v, done, err := e.tier(t.Baseline); err != nil || done {
		return v, err
	}
	return Verdict{Allowed: true}, nil
}

type evaluator struct {
	sets       Membership
	dir        Direction
	c          Conn
	self, peer netip.Addr
}

// tier evaluates an Admin or Baseline tier; done is false when no rule
// decided (none matched, or a Pass).
func (e *evaluator) tier(ps []*Policy) (Verdict, bool, error) {
	for _, p := range ps {
		if ok, err := e.in(p.Subject, e.self); err != nil || !ok {
			if err != nil {
				return Verdict{}, false, err
			}
			continue
		}
		for i := range p.Rules {
			r := &p.Rules[i]
			ok, err := e.matches(r)
			if err != nil {
				return Verdict{}, false, err
			}
			if !ok {
				continue
			}
			switch r.Action {
			case Pass:
				return Verdict{}, false, nil
			case Deny:
				return Verdict{Rule: r.ID}, true, nil
			default:
				return Verdict{Allowed: true, Rule: r.ID}, true, nil
			}
		}
	}
	return Verdict{}, false, nil
}

// matches reports whether one of r's clauses matches the connection.
func (e *evaluator) matches(r *Rule) (bool, error) {
	for _, cl := range r.Clauses {
		if cl.Peer != "" {
			if ok, err := e.in(cl.Peer, e.peer); err != nil || !ok {
				if err != nil {
					return false, err
				}
				continue
			}
		}
		if cl.Ports != nil && !portIn(cl.Ports, e.c) {
			continue
		}
		if cl.DstPorts != "" {
			x := Elem{Prefix: AddrElem(e.c.Dst).Prefix, Proto: e.c.Proto, Port: e.c.Port}
			if ok, err := e.sets.Has(cl.DstPorts, x); err != nil || !ok {
				if err != nil {
					return false, err
				}
				continue
			}
		}
		if cl.Pairs != "" {
			if ok, err := e.sets.Has(cl.Pairs, PairElem(e.self, e.peer)); err != nil || !ok {
				if err != nil {
					return false, err
				}
				continue
			}
		}
		return true, nil
	}
	return false, nil
}

func portIn(rs []PortRange, c Conn) bool {
	for _, r := range rs {
		if r.Proto == c.Proto && c.Port >= r.First && c.Port <= r.Last {
			return true
		}
	}
	return false
}

// in reports whether a is in the address or prefix set id ("": in none).
func (e *evaluator) in(id SetID, a netip.Addr) (bool, error) {
	if id == "" {
		return false, nil
	}
	return e.sets.Has(id, AddrElem(a))
}

// modelSets is the model's own sets as a Membership.
type modelSets map[SetID]*Set

func (m modelSets) Has(id SetID, e Elem) (bool, error) {
	s := m[id]
	if s == nil {
		return false, nil
	}
	if e.Proto == 0 && !e.Src.IsValid() {
		return s.Contains(e.Prefix.Addr()), nil
	}
	return s.Has(e), nil
}
