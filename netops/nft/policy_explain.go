package nft

import (
	"errors"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// Explaining a verdict of the policy table (`cnibox doctor --policy`): the
// table's rules walked in the kernel's order, with the kernel's own sets
// asked for each membership, so the answer is what the table does now, not
// what a model says it should.

// PolicyConn is a connection's first packet.
type PolicyConn struct {
	Src, Dst netip.Addr
	Proto    uint8
	Port     uint16
}

// PolicyVerdict is one direction's decision and what made it: the counter
// of the deciding rule, or "node" (the node's own traffic), "pending",
// "isolation" (a NetworkPolicy isolates the pod and none of its rules
// allows), "" (no rule: the default). Policy is the chain ID of the
// deciding rule's policy.
type PolicyVerdict struct {
	Allowed bool
	Counter string
	Policy  string
}

// ExplainPolicy decides c by r (the rules in the table, as the agent wrote
// them) in direction ingress (at the destination) or egress (at the
// source), reading set memberships from the kernel.
func (h *Handle) ExplainPolicy(r *PolicyRules, c PolicyConn, ingress bool) (PolicyVerdict, error) {
	if _, err := h.nftConn(); err != nil {
		return PolicyVerdict{}, err
	}
	e := explainer{h: h, c: c, self: c.Src, peer: c.Dst}
	t := &r.Egress
	if ingress {
		e.self, e.peer, t = c.Dst, c.Src, &r.Ingress
		// The node's own traffic leaves on the output hook, which the
		// table is not on (no rule decides it; a forged packet from a
		// node address on the forward hook is dropped by the source
		// address check of its port, or judged below without it).
		if ok, err := e.in(r.NodeAddrs, c.Src); err != nil || ok {
			return PolicyVerdict{Allowed: true, Counter: "node"}, err
		}
	}
	if ok, err := e.in(PolicyPending, e.self); err != nil || ok {
		return PolicyVerdict{Counter: "pending"}, err
	}
	if v, done, err := e.tier(t.Admin); err != nil || done {
		return v, err
	}
	if ok, err := e.in(t.Isolated, e.self); err != nil {
		return PolicyVerdict{}, err
	} else if ok {
		for _, p := range t.NetworkPolicy {
			if v, done, _, err := e.policy(p, true); err != nil || done {
				return v, err
			}
		}
		return PolicyVerdict{Counter: "isolation"}, nil
	}
	if v, done, err := e.tier(t.Baseline); err != nil || done {
		return v, err
	}
	return PolicyVerdict{Allowed: true}, nil
}

type explainer struct {
	h          *Handle
	c          PolicyConn
	self, peer netip.Addr
}

// tier walks an Admin or Baseline tier; done is false when nothing decided
// (no rule matched, or a Pass).
func (e *explainer) tier(ps []PolicyChain) (PolicyVerdict, bool, error) {
	for _, p := range ps {
		v, done, pass, err := e.policy(p, false)
		if err != nil || pass {
			return PolicyVerdict{}, false, err
		}
		if done {
			return v, true, nil
		}
	}
	return PolicyVerdict{}, false, nil
}

// policy walks one policy's rules if it selects the pod; done reports a
// decision, pass a Pass rule (the rest of the tier skipped).
func (e *explainer) policy(p PolicyChain, np bool) (v PolicyVerdict, done, pass bool, err error) {
	if ok, err := e.in(p.Subject, e.self); err != nil || !ok {
		return v, false, false, err
	}
	for _, r := range p.Rules {
		ok, err := e.matches(r)
		if err != nil {
			return v, false, false, err
		}
		if !ok {
			continue
		}
		if !np && r.Action == PolicyPass {
			return v, false, true, nil
		}
		v = PolicyVerdict{Counter: counterName(r.Counter), Policy: p.ID}
		v.Allowed = np || r.Action == PolicyAccept || r.Action == PolicyAllow
		return v, true, false, nil
	}
	return v, false, false, nil
}

func (e *explainer) matches(r PolicyRule) (bool, error) {
	for _, cl := range r.Clauses {
		if cl.Peer != "" {
			if ok, err := e.in(cl.Peer, e.peer); err != nil || !ok {
				if err != nil {
					return false, err
				}
				continue
			}
		}
		if cl.Ports != nil && !portsMatch(cl.Ports, e.c) {
			continue
		}
		if cl.DstPorts != "" {
			key := append(e.c.Dst.AsSlice(), e.c.Proto, 0, 0, 0, byte(e.c.Port>>8), byte(e.c.Port), 0, 0)
			if ok, err := e.has(policySetName(cl.DstPorts, e.c.Dst.Is6()), key); err != nil || !ok {
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

func portsMatch(ps []PolicyPorts, c PolicyConn) bool {
	for _, p := range ps {
		if p.Proto == c.Proto && c.Port >= p.First && c.Port <= p.Last {
			return true
		}
	}
	return false
}

// in reports whether the kernel's set name holds a (an interval set: a
// prefix holding it).
func (e *explainer) in(name string, a netip.Addr) (bool, error) {
	if name == "" {
		return false, nil
	}
	return e.has(policySetName(name, a.Is6()), a.AsSlice())
}

func (e *explainer) has(set string, key []byte) (bool, error) {
	_, err := e.h.getElem(PolicyTable, set, key)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENOENT):
		return false, nil
	}
	return false, fmt.Errorf("look %x up in %s: %w", key, set, err)
}
