// Package policy is cnibox-agent's NetworkPolicy engine without the kernel:
// it resolves networking.k8s.io/v1 NetworkPolicies and the
// policy.networking.k8s.io/v1alpha2 ClusterNetworkPolicies of
// sigs.k8s.io/network-policy-api, with the pods and namespaces they select,
// to a plain model of one node: per direction three tiers (Admin
// ClusterNetworkPolicies by priority, NetworkPolicies, Baseline
// ClusterNetworkPolicies), each policy's rules as clauses over address sets
// and port ranges, and the sets' elements. The nftables side turns the model
// into sets, verdict maps and chains; a pod that comes, goes or changes its
// labels changes set elements only (Engine's Delta), never rules.
//
// Resolve and Evaluate are pure; Engine keeps the inputs and indexes and
// returns the Delta of each change. The watcher (watch.go, not in the
// etcd-only build) feeds an Engine from the API server's informers.
// docs/policy.md states the semantics.
package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
)

// Direction is the direction of traffic a rule applies to, seen from the
// pods a policy selects (its subject).
type Direction uint8

const (
	Ingress Direction = iota // traffic to the subject; peers are sources
	Egress                   // traffic from the subject; peers are destinations
)

func (d Direction) String() string {
	if d == Egress {
		return "egress"
	}
	return "ingress"
}

// Tier is the place of a policy in the evaluation order of a direction.
type Tier uint8

const (
	TierAdmin         Tier = iota // ClusterNetworkPolicy, tier Admin
	TierNetworkPolicy             // networking.k8s.io/v1 NetworkPolicy
	TierBaseline                  // ClusterNetworkPolicy, tier Baseline
)

func (t Tier) String() string {
	return [...]string{"admin", "networkpolicy", "baseline"}[t]
}

// Action is what a matching rule does with a connection.
type Action uint8

const (
	// Allow is a NetworkPolicy rule's: the connection is allowed; a
	// subject isolated in the direction that no rule allows is dropped.
	Allow  Action = iota
	Accept        // final: no later rule or tier is consulted
	Deny          // final: dropped
	Pass          // the rest of the tier is skipped; the next tier decides
)

func (a Action) String() string {
	return [...]string{"allow", "accept", "deny", "pass"}[a]
}

// Protocol is an IP protocol number (what nftables' meta l4proto matches).
type Protocol uint8

const (
	TCP  Protocol = 6
	UDP  Protocol = 17
	SCTP Protocol = 132
)

// protocolNames are the protocols the API knows, by the names it gives them.
var protocolNames = map[Protocol]string{TCP: "TCP", UDP: "UDP", SCTP: "SCTP"}

func (p Protocol) String() string {
	if s, ok := protocolNames[p]; ok {
		return s
	}
	return fmt.Sprintf("proto-%d", uint8(p))
}

// SetID names an address set. It is a hash of the set's definition (Set.Key),
// the same in every agent and across restarts, so the nftables side can name
// its set after it and find it again.
type SetID string

// SetKind says what a set's elements are.
type SetKind uint8

const (
	// Addrs: pod addresses (Elem.Prefix is a single address).
	Addrs SetKind = iota
	// CIDRs: prefixes (an ipBlock's cidr minus its excepts, or a
	// ClusterNetworkPolicy's networks): an interval set.
	CIDRs
	// Ported: (address, protocol, port) of the named ports of pods,
	// resolved per pod: matched against the connection's destination.
	Ported
)

// Elem is one element of a set. Port and Proto are zero but in a Ported
// set.
type Elem struct {
	Prefix netip.Prefix
	Proto  Protocol
	Port   uint16
}

func (e Elem) String() string {
	if e.Proto == 0 {
		return e.Prefix.String()
	}
	return fmt.Sprintf("%s . %s . %d", e.Prefix.Addr(), e.Proto, e.Port)
}

// Set is an address set of the model. Its elements are counted: two pods
// may briefly hold one address (one terminating, one starting), and the
// address stays until both are gone.
type Set struct {
	ID   SetID
	Kind SetKind
	Key  string // the definition, readable: what the nftables comment shows
	n    map[Elem]int
}

// Has reports whether e is in the set.
func (s *Set) Has(e Elem) bool { return s.n[e] > 0 }

// Len is the number of elements.
func (s *Set) Len() int { return len(s.n) }

// Elems returns the elements, sorted.
func (s *Set) Elems() []Elem {
	out := make([]Elem, 0, len(s.n))
	for e := range s.n {
		out = append(out, e)
	}
	slices.SortFunc(out, cmpElem)
	return out
}

// add counts e in; it reports whether e is new.
func (s *Set) add(e Elem) bool {
	if s.n == nil {
		s.n = map[Elem]int{}
	}
	s.n[e]++
	return s.n[e] == 1
}

// del counts e out; it reports whether e is gone.
func (s *Set) del(e Elem) bool {
	c, ok := s.n[e]
	if !ok {
		return false
	}
	if c <= 1 {
		delete(s.n, e)
		return true
	}
	s.n[e] = c - 1
	return false
}

func cmpElem(a, b Elem) int {
	if c := a.Prefix.Addr().Compare(b.Prefix.Addr()); c != 0 {
		return c
	}
	if a.Prefix.Bits() != b.Prefix.Bits() {
		return a.Prefix.Bits() - b.Prefix.Bits()
	}
	if a.Proto != b.Proto {
		return int(a.Proto) - int(b.Proto)
	}
	return int(a.Port) - int(b.Port)
}

// PortRange is a protocol and an inclusive range of destination ports;
// First 0 and Last 65535 is every port of the protocol.
type PortRange struct {
	Proto       Protocol
	First, Last uint16
}

// Clause is one match of a rule: the peer is in Peer ("" = any address),
// and the destination port is in one of Ports (nil = any protocol and
// port), and the connection's (destination, protocol, port) is in DstPorts
// ("" = not matched). A rule matches when one of its clauses does; a rule
// with no clause matches nothing.
type Clause struct {
	Peer     SetID
	Ports    []PortRange
	DstPorts SetID
}

// Rule is one rule of a policy, in the policy's order.
type Rule struct {
	// ID is the policy's ID, the direction and the rule's index
	// ("np/default/web/ingress/0"): the name of its counter.
	ID      string
	Name    string // a ClusterNetworkPolicy rule's name; "" for NetworkPolicy
	Action  Action
	Clauses []Clause
}

// Policy is one policy's part in one direction.
type Policy struct {
	// ID is "np/<namespace>/<name>" or "cnp/<name>".
	ID       string
	Tier     Tier
	Priority int32 // ClusterNetworkPolicy's; 0 for NetworkPolicy
	// Subject is the set of the addresses of the local pods it selects.
	Subject SetID
	Rules   []Rule
	// FailClosed reports whether part of the policy could not be expressed
	// and was replaced by its closed form (Issues say what).
	FailClosed bool
}

// Tiers is one direction's policies in evaluation order.
type Tiers struct {
	Admin         []*Policy // by priority, then name
	NetworkPolicy []*Policy // by namespace and name (their order is moot)
	Baseline      []*Policy // by priority, then name
	// Isolated is the set of the local pods' addresses that a
	// NetworkPolicy with this direction selects: what no NetworkPolicy rule
	// allows is dropped for them.
	Isolated SetID
}

// Model is what the policies make of one node.
type Model struct {
	Node string
	// NodeAddrs is the set of the node's own addresses: what comes from
	// them to a pod of the node (the kubelet's probes) is allowed before
	// any tier, as upstream expects.
	NodeAddrs SetID
	Ingress   Tiers
	Egress    Tiers
	Sets      map[SetID]*Set
	Issues    []Issue // what could not be expressed, by policy and field
	// LocalPods are the node's pods by "<namespace>/<name>" (addresses,
	// labels, named ports), host-network ones too.
	LocalPods map[string]*Pod
	// GuardNamespaces are the namespaces of every NetworkPolicy, and
	// GuardAll reports a ClusterNetworkPolicy: where a policy could select
	// a pod that comes to this node. The tiers hold only the policies
	// that select a pod here now.
	GuardNamespaces []string
	GuardAll        bool
}

// Tiers returns the direction's tiers.
func (m *Model) Tiers(d Direction) *Tiers {
	if d == Egress {
		return &m.Egress
	}
	return &m.Ingress
}

// ShortID is a name of at most 16 characters for s (a rule's or policy's
// ID), for the nftables objects whose names have limits.
func ShortID(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:8])
}

// setID is the ID of the set defined by key.
func setID(key string) SetID {
	return SetID("s" + ShortID(key)[:15])
}
