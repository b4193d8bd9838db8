package nft

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/google/nftables"
	mdnetlink "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// PolicyPair is what a pod learned for a domainNames peer: an address it
// resolved for one of the peer's names, for as long as TTL.
type PolicyPair struct {
	Pod, Dst netip.Addr
	TTL      time.Duration
}

// LearnPolicyPairs puts pairs in the policy table's Pairs set (a
// domainNames peer's), each expiring after its TTL (at least 1 s): in one
// transaction, so that the caller (the agent's DNS proxy) hands the pod
// its answer only once every address of it is allowed. A pair already
// there keeps the later of its expiration and the new one. A missing set
// (its policy just went) is no error: nothing is written.
func (h *Handle) LearnPolicyPairs(set policymodel.SetID, pairs []PolicyPair) error {
	if _, err := h.nftConn(); err != nil {
		return err
	}
	// Twice at most: a pair that expired between its get and the delete
	// fails the batch (ENOENT), and the second try sees it gone.
	var err error
	for range 2 {
		var again bool
		if again, err = h.learnPairs(set, pairs); !again {
			break
		}
	}
	return err
}

// learnPairs is one try of LearnPolicyPairs; again reports an ENOENT that
// a second try may not meet.
func (h *Handle) learnPairs(set policymodel.SetID, pairs []PolicyPair) (again bool, err error) {
	var del, add [2][]nftElem // by family: 0 IPv4, 1 IPv6
	for _, p := range pairs {
		pod, dst := p.Pod.Unmap(), p.Dst.Unmap()
		if !pod.IsValid() || !dst.IsValid() || pod.Is6() != dst.Is6() {
			return false, fmt.Errorf("learn %s . %s in %s: want two addresses of one family", p.Pod, p.Dst, set)
		}
		fam := 0
		if pod.Is6() {
			fam = 1
		}
		ms := max(uint64(p.TTL/time.Millisecond), 1000)
		key := policyElemKey(policymodel.PairElem(pod, dst), false)
		got, err := h.getElem(PolicyTable, policySetName(string(set), fam == 1), key)
		switch {
		case errors.Is(err, unix.ENOENT):
		case err != nil:
			return false, fmt.Errorf("learn %s . %s in %s: %w", pod, dst, set, classify(err))
		default:
			left := uint64(0)
			for _, m := range got {
				_, es, err := parseNftElems(m.Data)
				if err != nil {
					return false, err
				}
				for _, e := range es {
					left = max(left, e.expiresMS)
				}
			}
			if left >= ms {
				continue // it lasts longer already
			}
			del[fam] = append(del[fam], nftElem{key: key})
		}
		add[fam] = append(add[fam], nftElem{key: key, timeoutMS: ms})
	}
	var msgs []mdnetlink.Message
	for fam, v6 := range []bool{false, true} {
		name := policySetName(string(set), v6)
		if len(del[fam]) > 0 {
			msgs = append(msgs, familyElemMsg(nftables.TableFamilyINet, PolicyTable, name, unix.NFT_MSG_DELSETELEM, mdnetlink.Acknowledge, del[fam], false))
		}
		if len(add[fam]) > 0 {
			msgs = append(msgs, familyElemMsg(nftables.TableFamilyINet, PolicyTable, name, unix.NFT_MSG_NEWSETELEM, mdnetlink.Acknowledge|mdnetlink.Create, add[fam], true))
		}
	}
	if len(msgs) == 0 {
		return false, nil
	}
	if err := h.commitRaw(msgs...); err != nil {
		if errors.Is(err, unix.ENOENT) {
			// an element expired meanwhile, or the set went with its
			// policy (then the next try finds nothing to add to)
			return len(del[0])+len(del[1]) > 0, nil
		}
		return false, fmt.Errorf("learn %d pairs in %s in %s: %w", len(pairs), set, h.where(), classify(err))
	}
	return false, nil
}
