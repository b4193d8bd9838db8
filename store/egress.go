package store

import (
	"net/netip"
	"time"
)

// Bucket egress holds the agent's view of the EgressGateways on this node
// (one record, key "egress"), which `cnibox inspect egress` reads: the
// agent writes it after each change of what the node programs.

// EgressState is what the agent last wrote of the node's egress gateways.
type EgressState struct {
	Node      string          `json:"node"`
	Uplink    string          `json:"uplink"`
	Gateways  []EgressGateway `json:"gateways"`
	Takeovers uint64          `json:"takeovers"` // addresses this node took from another holder since the agent started
	Updated   time.Time       `json:"updated"`
	AgentPID  int             `json:"agentPID,omitempty"`
}

// EgressGateway is one gateway as this node sees it.
type EgressGateway struct {
	Name    string     `json:"name"`
	Ready   bool       `json:"ready"`
	Reason  string     `json:"reason,omitempty"`
	Message string     `json:"message,omitempty"`
	IPs     []EgressIP `json:"ips"`
}

// EgressIP is one of a gateway's addresses.
type EgressIP struct {
	IP     netip.Addr `json:"ip"`
	Holder string     `json:"holder,omitempty"` // "" none
	// Eligible: this node may hold it (Rank: its place among those that
	// may, 0 first).
	Eligible bool `json:"eligible"`
	Rank     int  `json:"rank,omitempty"`
	// LocalPods: this node's pods that leave from it ("namespace/name").
	LocalPods []string `json:"localPods,omitempty"`
	// Pods: how many pods of the cluster leave from it.
	Pods int `json:"pods"`
}

var egressRecords = nodeViews[EgressState, *EgressState]{records[EgressState]{bucket: []byte("egress"), what: "egress state"}}

func (st *EgressState) stamp() (node string, updated *time.Time) { return st.Node, &st.Updated }

// PutEgress records st, replacing the previous one. Updated is set to now.
func (s *Store) PutEgress(st EgressState) error { return egressRecords.put(s, st) }

// Egress returns the recorded egress state.
func (s *Store) Egress() (st EgressState, found bool, err error) { return egressRecords.get(s) }
