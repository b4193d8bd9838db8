package nft

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	mdnetlink "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// A pod started faster than the agent learns of it, or while the agent is
// down, must not be open where a policy could select it. The agent keeps,
// in the policy table and in the transaction that changes the rules, the
// guard set: the namespaces in which the last policies it knew could
// select a pod (every namespace when a ClusterNetworkPolicy exists). The
// CNI ADD reads it and puts the pod's addresses in the pending set, which
// drops everything to and from them but the node's own traffic, before the
// pod has its addresses; the agent takes them out in the transaction that
// gives the pod its place in the sets. Without the table (no agent, or
// --network-policy=false), or in a namespace no policy could select,
// nothing changes.
//
// The guard set's keys are the first 16 bytes of the SHA-256 of a
// namespace's name, kept in a set typed ipv6_addr for want of a raw type
// of that size; all zeros stands for every namespace.

// PolicyGuard is what the guard set says.
type PolicyGuard struct {
	All        bool     // a policy could select a pod of any namespace
	Namespaces []string // else these
}

const policyGuardSet = "guard"

func policyGuardObj() *nftables.Set {
	return &nftables.Set{Table: policyTableObj(), Name: policyGuardSet, KeyType: nftables.TypeIP6Addr,
		Comment: "sha256[:16] of the namespaces a policy could select pods in; :: all"}
}

// guardKey is the guard set's key of namespace ns ("" = every namespace).
func guardKey(ns string) []byte {
	if ns == "" {
		return make([]byte, 16)
	}
	h := sha256.Sum256([]byte(ns))
	return h[:16]
}

// queueGuard replaces the guard set's elements with g's.
func (t *txn) queueGuard(g *PolicyGuard) error {
	s := policyGuardObj()
	if err := t.addSet(s, nil); err != nil {
		return err
	}
	t.conn().FlushSet(s)
	var elems []nftables.SetElement
	if g.All {
		elems = append(elems, nftables.SetElement{Key: guardKey("")})
	}
	for _, ns := range g.Namespaces {
		elems = append(elems, nftables.SetElement{Key: guardKey(ns)})
	}
	if len(elems) == 0 {
		return nil
	}
	return t.conn().SetAddElements(s, elems)
}

// MarkPolicyPending puts addrs, the addresses of a new pod of namespace ns,
// in the policy table's pending set when the table's guard says a policy
// could select a pod there; it reports whether it did. Without the table,
// nothing is done.
func (h *Handle) MarkPolicyPending(ns string, addrs []netip.Addr) (bool, error) {
	if _, err := h.nftConn(); err != nil {
		return false, err
	}
	guarded := false
	for _, key := range [][]byte{guardKey(""), guardKey(ns)} {
		_, err := h.getElem(PolicyTable, policyGuardSet, key)
		if err == nil {
			guarded = true
			break
		}
		if !errors.Is(err, unix.ENOENT) {
			return false, fmt.Errorf("read the policy guard in %s: %w", h.where(), err)
		}
	}
	if !guarded || len(addrs) == 0 {
		return false, nil
	}
	msgs := pendingMsgs(addrs, unix.NFT_MSG_NEWSETELEM, mdnetlink.Create|mdnetlink.Acknowledge)
	if err := h.commitRaw(msgs...); err != nil {
		return false, fmt.Errorf("mark %v pending in %s: %w", addrs, h.where(), classify(err))
	}
	return true, nil
}

// UnmarkPolicyPending takes addrs out of the pending set (a pod's DEL, or
// an ADD undone); those not there, or no table, are no error.
func (h *Handle) UnmarkPolicyPending(addrs []netip.Addr) error {
	if len(addrs) == 0 {
		return nil
	}
	if _, err := h.nftConn(); err != nil {
		return err
	}
	// Gets first: a DEL that finds nothing pending (the common case)
	// sends no batch, so closing the socket waits for no cleanup.
	var k4, k6 [][]byte
	for _, a := range addrs {
		if a.Is4() {
			k4 = append(k4, a.AsSlice())
		} else {
			k6 = append(k6, a.AsSlice())
		}
	}
	if _, err := h.delPresentElems(PolicyTable, setKeys{policySetName(PolicyPending, false), k4}, setKeys{policySetName(PolicyPending, true), k6}); err != nil {
		return fmt.Errorf("unmark %v pending in %s: %w", addrs, h.where(), classify(err))
	}
	return nil
}

// pendingMsgs are the element messages of addrs for the pending set's
// family parts.
func pendingMsgs(addrs []netip.Addr, msgType int, flags mdnetlink.HeaderFlags) []mdnetlink.Message {
	var v4, v6 []nftElem
	for _, a := range addrs {
		if a.Is4() {
			v4 = append(v4, nftElem{key: a.AsSlice()})
		} else {
			v6 = append(v6, nftElem{key: a.AsSlice()})
		}
	}
	var msgs []mdnetlink.Message
	if len(v4) > 0 {
		msgs = append(msgs, nftElemMsg(PolicyTable, policySetName(PolicyPending, false), msgType, flags, v4, false))
	}
	if len(v6) > 0 {
		msgs = append(msgs, nftElemMsg(PolicyTable, policySetName(PolicyPending, true), msgType, flags, v6, false))
	}
	return msgs
}
