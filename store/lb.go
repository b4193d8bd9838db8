package store

import (
	"net/netip"
	"time"
)

// Bucket lb holds the agent's view of the LoadBalancer addresses (one
// record, key "lb"), which `cnibox inspect lb` reads: cnibox-agent
// --lb-announce writes it after each change of who announces what.

// LBState is what the agent last wrote of the cluster's LoadBalancer
// pools, allocations and announcers.
type LBState struct {
	Node      string      `json:"node"`
	Uplink    string      `json:"uplink"`
	Pools     []LBPool    `json:"pools"`
	Addresses []LBAddress `json:"addresses"`
	Takeovers uint64      `json:"takeovers"` // addresses this node took from another announcer since the agent started
	Updated   time.Time   `json:"updated"`
	AgentPID  int         `json:"agentPID,omitempty"`
}

// LBPool is one LoadBalancerIPPool: its size and how many of its
// addresses Services hold.
type LBPool struct {
	Name     string  `json:"name"`
	Disabled bool    `json:"disabled,omitempty"`
	Conflict string  `json:"conflict,omitempty"` // why it cannot be used ("" none)
	Total    float64 `json:"total"`              // (a float: an IPv6 pool may hold more than 2^64)
	Used     int     `json:"used"`
}

// LBAddress is one address a Service holds, with who announces it.
type LBAddress struct {
	IP       netip.Addr `json:"ip"`
	Pool     string     `json:"pool,omitempty"`   // "" in no pool (not announced)
	Services []string   `json:"services"`         // "namespace/name", several when shared
	Local    bool       `json:"local,omitempty"`  // announced only from nodes with a ready endpoint
	Holder   string     `json:"holder,omitempty"` // the announcing node ("" none)
	// Eligible: this node may announce it (Rank: its place among those
	// that may, 0 first); Candidates: how many nodes may.
	Eligible   bool   `json:"eligible"`
	Rank       int    `json:"rank,omitempty"`
	Candidates int    `json:"candidates"`
	Why        string `json:"why,omitempty"` // why no node may announce it
}

var lbRecords = nodeViews[LBState, *LBState]{records[LBState]{bucket: []byte("lb"), what: "load balancer state"}}

func (st *LBState) stamp() (node string, updated *time.Time) { return st.Node, &st.Updated }

// PutLB records st, replacing the previous one. Updated is set to now.
func (s *Store) PutLB(st LBState) error { return lbRecords.put(s, st) }

// LB returns the recorded load balancer state.
func (s *Store) LB() (st LBState, found bool, err error) { return lbRecords.get(s) }
