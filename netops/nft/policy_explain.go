package nft

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// Explaining a verdict of the policy table (`cnibox doctor --policy`):
// policymodel's Evaluate, the one evaluator, walks the rules the agent
// wrote, asking the kernel's own sets for each membership, so the answer
// is what the table holds now, not what a model says it should.

// PolicyMembership is the policy table's sets as policymodel's Membership: set
// id's family part of the element's family is looked up in the kernel (an
// interval set answers for an address inside one of its prefixes).
func (h *Handle) PolicyMembership() (policymodel.Membership, error) {
	if _, err := h.nftConn(); err != nil {
		return nil, err
	}
	return kernelSets{h}, nil
}

type kernelSets struct{ h *Handle }

func (k kernelSets) Has(id policymodel.SetID, e policymodel.Elem) (bool, error) {
	a := e.Prefix.Addr()
	key := policyElemKey(e, e.Proto != 0)
	set := policySetName(string(id), a.Is6())
	_, err := k.h.getElem(PolicyTable, set, key)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENOENT):
		return false, nil
	}
	return false, fmt.Errorf("look %x up in %s: %w", key, set, err)
}
