package store

import (
	"time"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// Bucket policy holds what cnibox-agent's NetworkPolicy table means, for
// `cnibox inspect policy` and `cnibox doctor --policy`: the table names its
// chains, sets and counters by hashes, and the CLI reads no API server. The
// agent writes it with every change of the rules.

// PolicyIndex is the agent's last set of rules on the node, in the policy
// vocabulary as it is (a policy's chains and a rule's counter are named by
// policymodel.ShortID of their IDs).
type PolicyIndex struct {
	Node string `json:"node,omitempty"`
	// Rules are the rules the table was rendered from; nil in an index an
	// agent before them wrote (under the key "rules", in another form).
	Rules   *policymodel.Rules `json:"model,omitempty"`
	Updated time.Time          `json:"updated"`
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
