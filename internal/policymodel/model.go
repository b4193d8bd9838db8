// Package policymodel is the one vocabulary of cnibox's NetworkPolicy path:
// the plain model of one node that agent/policy compiles the API into,
// netops/nft renders into the policy table, the store keeps for
// `cnibox inspect policy` and `cnibox doctor --policy`, and Evaluate
// reads: per direction three tiers (Admin ClusterNetworkPolicies by
// priority, NetworkPolicies, Baseline ClusterNetworkPolicies), each
// policy's rules as clauses over address sets and port ranges, the sets'
// elements, and the Delta of a change. It imports the standard library
// only; docs/policy.md states the semantics.
package policymodel

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
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
// Its text form (JSON) is its name, so a stored model never depends on the
// order of the constants.
type Tier uint8

const (
	TierAdmin         Tier = iota // ClusterNetworkPolicy, tier Admin
	TierNetworkPolicy             // networking.k8s.io/v1 NetworkPolicy
	TierBaseline                  // ClusterNetworkPolicy, tier Baseline
)

var tierNames = [...]string{"admin", "networkpolicy", "baseline"}

func (t Tier) String() string { return nameOf(tierNames[:], int(t), "tier") }

// MarshalText is t's name.
func (t Tier) MarshalText() ([]byte, error) { return marshalName(tierNames[:], int(t), "tier") }

// UnmarshalText reads a name MarshalText wrote.
func (t *Tier) UnmarshalText(b []byte) error {
	i, err := unmarshalName(tierNames[:], b, "tier")
	*t = Tier(i)
	return err
}

// Action is what a matching rule does with a connection. Its text form
// (JSON) is its name, as Tier's.
type Action uint8

const (
	// Allow is a NetworkPolicy rule's: the connection is allowed; a
	// subject isolated in the direction that no rule allows is dropped.
	Allow  Action = iota
	Accept        // final: no later rule or tier is consulted
	Deny          // final: dropped
	Pass          // the rest of the tier is skipped; the next tier decides
)

var actionNames = [...]string{"allow", "accept", "deny", "pass"}

func (a Action) String() string { return nameOf(actionNames[:], int(a), "action") }

// MarshalText is a's name.
func (a Action) MarshalText() ([]byte, error) { return marshalName(actionNames[:], int(a), "action") }

// UnmarshalText reads a name MarshalText wrote.
func (a *Action) UnmarshalText(b []byte) error {
	i, err := unmarshalName(actionNames[:], b, "action")
	*a = Action(i)
	return err
}

func nameOf(names []string, i int, what string) string {
	if i < len(names) {
		return names[i]
	}
	return fmt.Sprintf("%s-%d", what, i)
}

func marshalName(names []string, i int, what string) ([]byte, error) {
	if i >= len(names) {
		return nil, fmt.Errorf("policy %s %d: not one of %v", what, i, names)
	}
	return []byte(names[i]), nil
}

func unmarshalName(names []string, b []byte, what string) (int, error) {
	for i, n := range names {
		if n == string(b) {
			return i, nil
		}
	}
	return 0, fmt.Errorf("policy %s %q: not one of %v", what, b, names)
}

// Protocol is an IP protocol number (what nftables' meta l4proto matches).
type Protocol uint8

const (
	TCP  Protocol = 6
	UDP  Protocol = 17
	SCTP Protocol = 132
)

// protocols are the protocols the API knows (an array, not a map: this
// package is linked into every CNI call, where a map would be built at
// start-up, TestNoInitCode).
var protocols = [...]Protocol{TCP, UDP, SCTP}

func (p Protocol) String() string {
	switch p {
	case TCP:
		return "TCP"
	case UDP:
		return "UDP"
	case SCTP:
		return "SCTP"
	}
	return fmt.Sprintf("proto-%d", uint8(p))
}

// ProtocolNamed is the protocol the API names name ("TCP", "UDP", "SCTP");
// ok is false for another name.
func ProtocolNamed(name string) (p Protocol, ok bool) {
	for _, p := range protocols {
		if name == p.String() {
			return p, true
		}
	}
	return 0, false
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
// A field added here must reach Evaluate, the renderer (and its chains'
// fingerprint) and the trace test's model: netops/nft's
// TestPolicyClauseFields fails until it does.
type Clause struct {
	Peer     SetID       `json:",omitempty"`
	Ports    []PortRange // nil and empty differ: empty matches nothing
	DstPorts SetID       `json:",omitempty"`
	// Pairs, if set, is a Pairs set: the clause matches only when the
	// (pod, peer) pair is in it (a domainNames peer: the pod resolved
	// the peer's address for one of the names).
	Pairs SetID `json:",omitempty"`
}

// Rule is one rule of a policy, in the policy's order.
type Rule struct {
	// ID is the policy's ID, the direction and the rule's index
	// ("np/default/web/ingress/0", NewRuleID): ID.Key() names its
	// counter.
	ID      RuleID
	Name    string `json:",omitempty"` // a ClusterNetworkPolicy rule's name; "" for NetworkPolicy
	Action  Action
	Clauses []Clause
}

// Policy is one policy's part in one direction.
type Policy struct {
	// ID is "np/<namespace>/<name>" or "cnp/<name>"; ShortID(ID) names its
	// chains.
	ID       string
	Tier     Tier
	Priority int32 `json:",omitempty"` // ClusterNetworkPolicy's; 0 for NetworkPolicy
	// Subject is the set of the addresses of the local pods it selects.
	Subject SetID
	Rules   []Rule
	// FailClosed reports whether part of the policy could not be expressed
	// and was replaced by its closed form (the model's Issues say what).
	FailClosed bool `json:",omitempty"`
}

// Tiers is one direction's policies in evaluation order.
type Tiers struct {
	Admin         []*Policy // by priority, then name
	NetworkPolicy []*Policy // by namespace and name (their order is moot)
	Baseline      []*Policy // by priority, then name
	// Isolated is the set of the local pods' addresses that a
	// NetworkPolicy with this direction selects: what no NetworkPolicy rule
	// allows is dropped for them.
	Isolated SetID `json:",omitempty"`
}

// Rules are a node's rules without the sets' elements: what the policy
// table's chains are made of, and what the store keeps.
type Rules struct {
	// NodeAddrs is the set of the node's own addresses: what comes from
	// them to a pod of the node (the kubelet's probes) is allowed before
	// any tier, as upstream expects.
	NodeAddrs SetID `json:",omitempty"`
	Ingress   Tiers
	Egress    Tiers
	// Log is which verdicts are logged, and where (the flow log).
	Log FlowLog `json:",omitzero"`
	// Domains are the domainNames peers of the rules: what the agent's
	// DNS proxy learns into their Pairs sets, for which pods.
	Domains []Domains `json:",omitempty"`
}

// Domains is one domainNames peer: the names (network-policy-api's
// DomainName patterns, as the policy gives them), the Pairs set its
// clause matches, and the subject of its policy (the pods whose answers
// for the names are learned into the set).
type Domains struct {
	Names   []string
	Set     SetID
	Subject SetID
}

// Tiers returns the direction's tiers.
func (r *Rules) Tiers(d Direction) *Tiers {
	if d == Egress {
		return &r.Egress
	}
	return &r.Ingress
}

// Model is what the policies make of one node.
type Model struct {
	Node string
	Rules
	Sets   map[SetID]*Set
	Issues []Issue // what could not be expressed, by policy and field
	// LocalPods are the node's pods by "<namespace>/<name>", host-network
	// ones too.
	LocalPods map[string]LocalPod
	// GuardNamespaces are the namespaces of every NetworkPolicy, and
	// GuardAll reports a ClusterNetworkPolicy: where a policy could select
	// a pod that comes to this node. The tiers hold only the policies
	// that select a pod here now.
	GuardNamespaces []string
	GuardAll        bool
	// Staged is what the rules would be with the staged policies
	// (evaluated, never enforced: the kernel has Rules only); nil without
	// one. Its sets are the model's.
	Staged *Rules `json:",omitempty"`
	// Resolvers are the DNS servers the operator trusts (the cluster DNS
	// Service's addresses and endpoints, and the agent's
	// --dns-trusted-resolvers), sorted: domainNames peers learn only
	// from their answers (the DNS table diverts only queries to them).
	Resolvers []netip.Addr `json:",omitempty"`
	// Generation names the model among those of the agent's engines: a
	// model handed out never changes, a later one has another (larger)
	// Generation. A reader keys what it works out of a model (a verdict)
	// on it.
	Generation uint64 `json:"-"`
}

// LocalPod is what the model knows of a pod of its node.
type LocalPod struct {
	IPs []netip.Addr
	// HostNetwork pods share their node's addresses; Done pods (phase
	// Succeeded or Failed) hold none any more: neither is placed.
	HostNetwork, Done bool
}

// ShortID is a name of at most 16 characters for s (a rule's or policy's
// ID), for the nftables objects whose names have limits.
func ShortID(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:8])
}
