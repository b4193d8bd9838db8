package policymodel

import (
	"iter"
	"strconv"
	"strings"
)

// The names the vocabulary gives what it describes: policy and rule IDs,
// the keys of the policy table's counters and log prefixes, the name part
// of a policy's chains. Every package that makes or reads one of them
// calls these; none builds or parses one with its own string handling.

// The kinds of policy IDs: the first part of an ID.
const (
	KindNetworkPolicy       = "np"   // np/<namespace>/<name>
	KindClusterPolicy       = "cnp"  // cnp/<name>
	KindStagedNetworkPolicy = "snp"  // snp/<namespace>/<name>: evaluated, never enforced
	KindStagedClusterPolicy = "scnp" // scnp/<name>
	KindMultiNetworkPolicy  = "mnp"  // mnp/<namespace>/<name>
)

// NetworkPolicyID is the ID of the NetworkPolicy namespace/name.
func NetworkPolicyID(namespace, name string) string {
	return NamespacedPolicyID(KindNetworkPolicy, namespace, name)
}

// NamespacedPolicyID is the ID of the policy namespace/name of a
// namespaced kind (KindNetworkPolicy, KindStagedNetworkPolicy,
// KindMultiNetworkPolicy).
func NamespacedPolicyID(kind, namespace, name string) string {
	return kind + "/" + namespace + "/" + name
}

// ClusterPolicyID is the ID of the ClusterNetworkPolicy name.
func ClusterPolicyID(name string) string { return KindClusterPolicy + "/" + name }

// SplitPolicyID is a policy ID's kind, namespace ("" for a cluster-scoped
// kind) and name.
func SplitPolicyID(id string) (kind, namespace, name string) {
	kind, rest, _ := strings.Cut(id, "/")
	switch kind {
	case KindNetworkPolicy, KindStagedNetworkPolicy, KindMultiNetworkPolicy:
		if ns, n, ok := strings.Cut(rest, "/"); ok {
			return kind, ns, n
		}
	}
	return kind, "", rest
}

// RuleID names one rule of a policy in one direction:
// "<policy ID>/<direction>/<index>" (NewRuleID). Its Key names the rule's
// counter and log prefix in the policy table.
type RuleID string

// NewRuleID is the ID of rule index (from 0, in the policy's order) of
// policy's direction dir.
func NewRuleID(policy string, dir Direction, index int) RuleID {
	return RuleID(policy + "/" + dir.String() + "/" + strconv.Itoa(index))
}

// Split is the policy ID, direction and index NewRuleID was given; ok is
// false for an ID it did not make.
func (r RuleID) Split() (policy string, dir Direction, index int, ok bool) {
	s := string(r)
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		return "", 0, 0, false
	}
	index, err := strconv.Atoi(s[i+1:])
	j := strings.LastIndexByte(s[:i], '/')
	if err != nil || index < 0 || j < 0 {
		return "", 0, 0, false
	}
	for _, d := range Directions {
		if s[j+1:i] == d.String() {
			return s[:j], d, index, true
		}
	}
	return "", 0, 0, false
}

// RuleNode is the Verdict.Rule of what comes from the node's own addresses
// to its pods (Rules.NodeAddrs), allowed before any tier.
const RuleNode RuleID = "node"

// Key is the rule's counter key: ShortID of its ID.
func (r RuleID) Key() string { return ShortID(string(r)) }

// The policy table's counter keys that are not a rule's: what drops a
// packet no rule judged. A counter's name is CounterName(key); a log
// prefix carries the key (LogPrefix).
const (
	isolationKeyHead = "iso-" // + Direction.Short(): a NetworkPolicy's isolation
	defaultKeyHead   = "dflt-"
)

// Short is d's two-letter form in the table's names ("in", "eg").
func (d Direction) Short() string {
	if d == Egress {
		return "eg"
	}
	return "in"
}

// IsolationKey is the counter key of the drops of the NetworkPolicy tier's
// isolation in direction d ("iso-in", "iso-eg").
func IsolationKey(d Direction) string { return isolationKeyHead + d.Short() }

// DefaultKey is the log key of the default verdict (no rule matched) in
// direction d ("dflt-in", "dflt-eg"); it has no counter.
func DefaultKey(d Direction) string { return defaultKeyHead + d.Short() }

// KeyKind is what a counter key names.
type KeyKind uint8

const (
	KeyRule      KeyKind = iota // a rule's (RuleID.Key), or another of the table's own
	KeyIsolation                // IsolationKey
	KeyDefault                  // DefaultKey
)

// ParseKey reads a counter or log key: an isolation or default key's kind
// and direction; KeyRule for any other key (a rule's, CounterInvalid).
func ParseKey(key string) (KeyKind, Direction) {
	for _, k := range []struct {
		head string
		kind KeyKind
	}{{isolationKeyHead, KeyIsolation}, {defaultKeyHead, KeyDefault}} {
		if d, ok := strings.CutPrefix(key, k.head); ok {
			switch d {
			case Ingress.Short():
				return k.kind, Ingress
			case Egress.Short():
				return k.kind, Egress
			}
		}
	}
	return KeyRule, Ingress
}

// The keys of the policy table's drops before any tier; CounterInvalid
// (flowlog.go) is the third.
const (
	// CounterPending counts what is dropped to or from a pod the agent
	// has not placed yet (the table's pending set).
	CounterPending = "pending"
	// CounterLinkLocal counts the IPv6 link-local packets the forward
	// hook drops.
	CounterLinkLocal = "linklocal"
)

// CounterName is the name of the policy table's counter of key (a rule's
// Key, IsolationKey, CounterInvalid, ...): "c-<key>".
func CounterName(key string) string { return "c-" + key }

// ChainID is the name part of a policy's chains: ShortID of its ID.
func ChainID(policy string) string { return ShortID(policy) }

// Directions are both directions, in the order the walks below take them.
var Directions = [...]Direction{Ingress, Egress}

// Policies are t's policies in evaluation order: the Admin tier's, the
// NetworkPolicy tier's, the Baseline tier's.
func (t *Tiers) Policies() iter.Seq[*Policy] {
	return func(yield func(*Policy) bool) {
		for _, ps := range [...][]*Policy{t.Admin, t.NetworkPolicy, t.Baseline} {
			for _, p := range ps {
				if !yield(p) {
					return
				}
			}
		}
	}
}

// Policies are r's policies of both directions (ingress first), each
// direction's in evaluation order.
func (r *Rules) Policies() iter.Seq2[Direction, *Policy] {
	return func(yield func(Direction, *Policy) bool) {
		for _, d := range Directions {
			for p := range r.Tiers(d).Policies() {
				if !yield(d, p) {
					return
				}
			}
		}
	}
}

// AllRules are the rules of r's policies, each with its policy, in the
// order of Policies.
func (r *Rules) AllRules() iter.Seq2[*Policy, *Rule] {
	return func(yield func(*Policy, *Rule) bool) {
		for _, p := range r.Policies() {
			for i := range p.Rules {
				if !yield(p, &p.Rules[i]) {
					return
				}
			}
		}
	}
}
