//go:build !nokube

package egress

import (
	"github.com/cnibox/cnibox/agent/addrhold"
)

// LeasePrefix starts the name of every egress address's Lease
// (cnibox-egress-192-0-2-10); the agent's admission policy lets it write
// no other Lease but the whereabouts reclaim's.
const LeasePrefix = "cnibox-egress-"

// LeaseNamespace holds the egress Leases, and nothing else: the agent's
// Lease rights (bin/cnibox.yaml's Role cnibox-egress) are there only.
const LeaseNamespace = "cnibox-egress"

// LeaseLabel is on every egress Lease: the agents watch those.
const LeaseLabel = "cnibox.io/egress-ip"

// The election's pieces are addrhold's, which the LoadBalancer announcer
// shares (agent/lbannounce).
type (
	// Timing are the election's durations.
	Timing = addrhold.Timing
	// Claim is one node's view of one address's Lease.
	Claim = addrhold.Claim
	// Record is a Lease as the election reads it.
	Record = addrhold.Record
	// Action is what a claim asks of the caller.
	Action = addrhold.Action
)

// The actions.
const (
	Wait    = addrhold.Wait
	Take    = addrhold.Take
	Renew   = addrhold.Renew
	Release = addrhold.Release
)

// DefaultTiming is the agent's: a dead holder's address leaves from its
// successor about 2 s (at most 2.4 s) after its last renewal.
var DefaultTiming = addrhold.DefaultTiming

// leaseKind is the egress Leases' in namespace ns.
func leaseKind(ns string) addrhold.Kind {
	return addrhold.Kind{Prefix: LeasePrefix, Namespace: ns, Label: LeaseLabel}
}
