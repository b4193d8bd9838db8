package store

import (
	"encoding/json"
	"time"
)

// Bucket policy holds what cnibox-agent's NetworkPolicy table means, for
// `cnibox inspect policy`: the table names its chains, sets and counters by
// hashes, and the CLI reads no API server. The agent writes it with every
// change of the rules.

// PolicyIndex is the agent's last set of rules on the node.
type PolicyIndex struct {
	Node string `json:"node,omitempty"`
	// Isolated is, per direction ("ingress", "egress"), the set of the
	// pods a NetworkPolicy isolates.
	Isolated map[string]string `json:"isolated,omitempty"`
	Policies []PolicyEntry     `json:"policies"`
	// Rules are the table's rules as the agent wrote them (netops/nft's
	// PolicyRules, as JSON): what `cnibox doctor --policy` walks.
	Rules   json.RawMessage `json:"rules,omitempty"`
	Updated time.Time       `json:"updated"`
}

// PolicyEntry is one policy in one direction, in evaluation order.
type PolicyEntry struct {
	ID         string      `json:"id"` // np/<ns>/<name>, cnp/<name>
	Direction  string      `json:"direction"`
	Tier       string      `json:"tier"`
	Priority   int32       `json:"priority,omitempty"`
	Subject    string      `json:"subject"` // the table's set of the pods it selects
	FailClosed bool        `json:"failClosed,omitempty"`
	Rules      []PolicyRef `json:"rules"`
}

// PolicyRef is one rule of a policy and the name of its counter.
type PolicyRef struct {
	ID      string `json:"id"`
	Name    string `json:"name,omitempty"`
	Action  string `json:"action"`
	Counter string `json:"counter"`
}

var policyRecords = records[PolicyIndex]{bucket: []byte("policy"), what: "policy index"}

var policyKey = []byte("index")

// PutPolicyIndex replaces the policy index; Updated is set to now.
func (s *Store) PutPolicyIndex(idx PolicyIndex) error {
	idx.Updated = time.Now()
	return policyRecords.putKey(s, policyKey, "policy index", idx)
}

// PolicyIndex returns the policy index; found is false when the agent wrote
// none.
func (s *Store) PolicyIndex() (idx PolicyIndex, found bool, err error) {
	return policyRecords.getKey(s, policyKey)
}
