// Package flowlog is the node's policy flow log: one JSON record a line for
// each connection whose verdict a policy decided (allowed, denied, or what
// a staged policy would have done), as cnibox-agent writes it to
// /var/log/cnibox/flows.log and `cnibox flows` reads it (docs/flowlog.md).
//
// Writer appends records, rotates the file by size and count (rename
// rotation, internal/logrotate, safe for a log shipper that follows the
// file) and holds the rate to a token bucket, summing what it drops in one
// "suppressed" record a second; Reader reads the backups and the live file
// in order, filtered, and follows the file across rotations.
//
// The package is linked into the cnibox binary (the CLI): standard library
// only, and no code runs at start-up.
package flowlog

import (
	"net/netip"
	"strconv"
	"time"
)

// Verdict is what was done with a connection.
type Verdict string

// The verdicts of a record.
const (
	Allow       Verdict = "allow"
	Deny        Verdict = "deny"
	StagedAllow Verdict = "staged-allow" // a staged policy would allow what is denied
	StagedDeny  Verdict = "staged-deny"  // a staged policy would deny what is allowed
	Suppressed  Verdict = "suppressed"   // a summary of the records the rate limit dropped
)

// Known reports whether v is one of the verdicts above.
func (v Verdict) Known() bool {
	switch v {
	case Allow, Deny, StagedAllow, StagedDeny, Suppressed:
		return true
	}
	return false
}

// Direction is the side of the pod the verdict was taken on.
type Direction string

// The directions of a record.
const (
	Ingress Direction = "ingress"
	Egress  Direction = "egress"
)

// Proto is the IP protocol: its name for TCP, UDP, SCTP, ICMP and ICMPv6,
// else its number in decimal ("47"). Always a JSON string, so that a
// shipper's index keeps one type for the field.
type Proto string

// ProtoNumber is the Proto of IP protocol number n.
func ProtoNumber(n uint8) Proto {
	switch n {
	case 1:
		return "ICMP"
	case 6:
		return "TCP"
	case 17:
		return "UDP"
	case 58:
		return "ICMPv6"
	case 132:
		return "SCTP"
	}
	return Proto(strconv.Itoa(int(n)))
}

// Endpoint is one end of a connection. Namespace and Pod are empty for an
// address outside the cluster (or not a pod's); Port is 0 for a protocol
// without ports (ICMP).
type Endpoint struct {
	IP        netip.Addr `json:"ip"`
	Port      uint16     `json:"port,omitempty"`
	Namespace string     `json:"namespace,omitempty"`
	Pod       string     `json:"pod,omitempty"`
}

// Service is the Service a connection went to: the frontend its client
// sent it to (a ClusterIP, a NodePort on a node's address, an external or
// load balancer IP), which the node's services table DNATed to the
// record's Dst, and the Service port that frontend is, when the agent
// serves Services (--service-proxy). Left out for a connection no DNAT
// changed.
type Service struct {
	IP        netip.Addr `json:"ip"`
	Port      uint16     `json:"port,omitempty"`
	Namespace string     `json:"namespace,omitempty"`
	Name      string     `json:"name,omitempty"`
	// PortName is the Service port's name ("" for a Service's one
	// unnamed port).
	PortName string `json:"portName,omitempty"`
}

// The kinds of policy that decide a verdict.
const (
	KindNetworkPolicy              = "NetworkPolicy"
	KindClusterNetworkPolicy       = "ClusterNetworkPolicy"
	KindStagedNetworkPolicy        = "StagedNetworkPolicy"
	KindStagedClusterNetworkPolicy = "StagedClusterNetworkPolicy"
)

// The tiers of a ClusterNetworkPolicy.
const (
	TierAdmin    = "Admin"
	TierBaseline = "Baseline"
)

// RuleIsolation is Policy.Rule for a drop because NetworkPolicies isolate
// the pod in that direction and none of their rules allows the connection.
const RuleIsolation = "isolation"

// ReasonInvalid is Record.Reason for a packet dropped because conntrack
// calls it INVALID (it belongs to no connection, nor starts one: an
// unsolicited ICMP echo reply, a TCP segment with no flags): no policy
// decided, the table drops every such packet.
const ReasonInvalid = "invalid"

// Policy is the policy and rule that decided. For a drop by isolation, Rule
// is RuleIsolation, Isolating names the NetworkPolicies that isolate the
// pod in that direction (in the pod's namespace, Namespace) and Name may
// be empty.
type Policy struct {
	Kind      string   `json:"kind"`
	Namespace string   `json:"namespace,omitempty"`
	Name      string   `json:"name"`
	Tier      string   `json:"tier,omitempty"`
	Rule      string   `json:"rule"`
	Isolating []string `json:"isolating,omitempty"`
}

// RuleIndex is Policy.Rule for the rule at index i of its direction.
func RuleIndex(i int) string { return strconv.Itoa(i) }

// Pair is a source and destination the rate limit dropped records of, and
// how many.
type Pair struct {
	Src   netip.Addr `json:"src"`
	Dst   netip.Addr `json:"dst"`
	Count uint64     `json:"count"`
}

// Summary is what a suppressed record counts: the records dropped since
// Since, the pairs that had the most of them (at most TopPairs, most
// first), and Other, those of pairs past the MaxPairs tracked.
type Summary struct {
	Count uint64    `json:"count"`
	Since time.Time `json:"since"`
	Top   []Pair    `json:"top"`
	Other uint64    `json:"other,omitempty"`
	// Namespaces are the counts by source namespace (External for sources
	// that are no pod's; the first MaxPairs namespaces, most first),
	// NamespacesOther those of the namespaces past them: whose records
	// the rate limit took, every one of them named.
	Namespaces      []NamespaceCount `json:"namespaces,omitempty"`
	NamespacesOther uint64           `json:"namespacesOther,omitempty"`
}

// Record is one line of the flow log. Time is UTC (Writer makes it so).
// A suppressed record has Node, Time and Suppressed only.
type Record struct {
	Time       time.Time `json:"time"`
	Node       string    `json:"node"`
	Verdict    Verdict   `json:"verdict"`
	Direction  Direction `json:"direction,omitempty"`
	Proto      Proto     `json:"proto,omitempty"`
	Src        Endpoint  `json:"src,omitzero"`
	Dst        Endpoint  `json:"dst,omitzero"`
	Service    *Service  `json:"service,omitempty"`
	Policy     *Policy   `json:"policy,omitempty"`
	Reason     string    `json:"reason,omitempty"` // a deny no policy decided: ReasonInvalid
	Suppressed *Summary  `json:"suppressed,omitempty"`
}
