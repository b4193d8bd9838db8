package nft

import (
	"github.com/google/nftables/expr"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// policyChains is what the rules make of one direction and family: the
// chains in the order they must be created, each with its rules.
type policyChains struct {
	names []string
	rules map[string][][]expr.Any
	// keys: the fingerprints of the chains made from their source alone
	// (a NetworkPolicy's own chains: of its rules as text), which are
	// only rendered when the kernel does not have them as they are
	// (keep); kbuf: room for the text hashed (fpOf).
	keys map[string]chainFP
	keep func(chain string, key chainFP) bool
	kbuf []byte
	// rulesKeys: rulesKey of the policies as a render before made them
	// (nil: none), and keysUsed those of this render (policyTable).
	rulesKeys, keysUsed map[*policymodel.Policy]string
	// twins: the untracked twins (policy_entry.go) by name, each with
	// the chain it is made of; twinsDone: those whose rules are
	// rendered (twinRules).
	twins     map[string]twinOf
	twinsDone map[string]bool
	// lazyTwins: the twins' rules are not rendered here but as each twin
	// is queued (a full sync: policySpec's lazy chains), from its chain's.
	lazyTwins bool
	// ids: policymodel.ShortID of the policies' and rules' IDs, each
	// computed once per render.
	ids map[string]string
	log policymodel.FlowLog // which verdicts are logged
}

// short is policymodel.ChainID(id): the name part of a policy's chains,
// computed once per render.
func (pc *policyChains) short(id string) string {
	s, ok := pc.ids[id]
	if !ok {
		s = policymodel.ChainID(id)
		pc.ids[id] = s
	}
	return s
}

// ruleKey is id.Key(), the rule's counter key, computed once per render.
func (pc *policyChains) ruleKey(id policymodel.RuleID) string {
	s, ok := pc.ids[string(id)]
	if !ok {
		s = id.Key()
		pc.ids[string(id)] = s
	}
	return s
}

// empty drops pc's chains, keeping the maps' room (and the IDs: a
// function of the policies' names) for the next delta's render.
func (pc *policyChains) empty() {
	clear(pc.rules)
	clear(pc.keys)
	clear(pc.twins)
	clear(pc.twinsDone)
	clear(pc.names) // no string kept alive by the spare room
	pc.names = pc.names[:0]
	pc.keep, pc.rulesKeys, pc.keysUsed = nil, nil, nil
}

func (pc *policyChains) add(chain string, rule ...[]expr.Any) {
	if _, ok := pc.rules[chain]; !ok {
		pc.names = append(pc.names, chain)
		pc.rules[chain] = nil
	}
	pc.rules[chain] = append(pc.rules[chain], rule...)
}
