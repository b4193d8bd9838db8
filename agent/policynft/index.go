package policynft

import (
	"fmt"

	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/store"
)

// IndexTo makes the Syncer record, in the node's store under dataDir ("":
// store.Dir's default), what the table's hashed names mean, with every
// change of the rules: `cnibox inspect policy` reads it.
func (s *Syncer) IndexTo(dataDir string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.indexDir, s.index = store.Dir(dataDir), true
}

// Index is the store's record of a node's rules as they are.
func Index(node string, r *policymodel.Rules) store.PolicyIndex {
	return store.PolicyIndex{Node: node, Rules: r}
}

// writeIndex records the index of node's rules r in the store under dir
// (called with no lock held: the store may be slow, or busy).
func writeIndex(dir, node string, r *policymodel.Rules) error {
	st, err := store.Open(dir)
	if err != nil {
		return fmt.Errorf("policy index: %w", err)
	}
	defer st.Close()
	return st.PutPolicyIndex(Index(node, r))
}
