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
// A pod gone from the API is not gone from the node: a force-deleted pod
// (grace period 0) leaves the API at once while its containers still run
// until the kubelet kills them and the CNI DEL ends its attachment. Taken
// out of the sets, it would be open meanwhile. So the ADD also records the
// pod's addresses in the attached set (the DEL takes them out), and when
// the agent's model loses a pod of the node (PolicyChange.ToPending), the
// transaction that takes it out of the sets puts its addresses in the
// pending set; right after it the agent takes out those that are no longer
// attached (the DEL came first, as it does for every graceful deletion).
// The DEL takes the attached and pending elements out in one transaction,
// and the agent writes pending before it reads attached, so one of the two
// always takes the address out: none is left pending once its pod is gone.
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

// PolicyAttached is the set of the addresses of the node's pods between
// their ADD and their DEL.
const PolicyAttached = "attached"

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

// MarkPolicyPending records addrs, the addresses of a new pod of namespace
// ns, in the policy table's attached set and, when the table's guard says a
// policy could select a pod there, in its pending set; it reports whether
// they are pending. Without the table, nothing is sent but one get that
// finds it missing: a batch into a missing table is refused whole, and the
// kernel's abort of it cost every ADD with a runtime's pod arguments ~11 ms
// on a node without the agent's policy (docs/benchmarks.md).
//
// The agent may make the table between that get and the batch (its first
// full sync, in one transaction with the guard, pending and attached
// sets). The ADD then records nothing, as if it had come an instant
// earlier: its pod is one of those started before the table, which the
// agent places from the API when the pod's status carries its addresses
// and which are not in the attached set (docs/policy.md, "Pods attached
// before an agent with this set existed"). The code before the get had
// the same window (the guard read before the batch: a table made in
// between got the address attached, never pending). An ADD that sees the
// table keeps the guarantee: attached, and pending where guarded, before
// the pod has its addresses. A table deleted between the get and the
// batch (the agent's policy turned off) makes the batch fail with ENOENT:
// nothing is done, as without the table.
func (h *Handle) MarkPolicyPending(ns string, addrs []netip.Addr) (bool, error) {
	if _, err := h.nftConn(); err != nil {
		return false, err
	}
	if len(addrs) == 0 {
		return false, nil
	}
	table, err := h.nftTableExists(uint8(policyFamily), PolicyTable)
	if err != nil {
		return false, fmt.Errorf("read the policy table in %s: %w", h.where(), err)
	}
	guarded := false
	if table {
		if guarded, err = h.policyGuarded(ns); err != nil {
			return false, fmt.Errorf("read the policy guard in %s: %w", h.where(), err)
		}
	}
	msgs := pendingMsgs(table, guarded, addrs)
	if len(msgs) == 0 {
		return false, nil
	}
	err = h.commitRaw(msgs...)
	if errors.Is(err, unix.ENOENT) && guarded {
		// A table an older agent wrote (until the new one's first sync):
		// without the set gen-f (its entry chains check the pending set
		// first, so nothing needs emptying), or without the attached set
		// too.
		err = h.commitRaw(msgs[:len(msgs)-1]...)
		if errors.Is(err, unix.ENOENT) {
			err = h.commitRaw(addrMsgs(PolicyPending, addrs, unix.NFT_MSG_NEWSETELEM, mdnetlink.Create|mdnetlink.Acknowledge)...)
		}
	}
	switch {
	case errors.Is(err, unix.ENOENT):
		return false, nil // the table went meanwhile
	case err != nil:
		return false, fmt.Errorf("mark %v pending in %s: %w", addrs, h.where(), classify(err))
	}
	return guarded, nil
}

// policyGuarded reports whether the policy table's guard says a policy
// could select a pod of namespace ns (a missing guard says no).
func (h *Handle) policyGuarded(ns string) (bool, error) {
	for _, key := range [][]byte{guardKey(""), guardKey(ns)} {
		_, err := h.getElem(PolicyTable, policyGuardSet, key)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, unix.ENOENT) {
			return false, err
		}
	}
	return false, nil
}

// pendingMsgs are MarkPolicyPending's messages for addrs: none without
// the table; else the attached set's elements and, when the guard names
// the pod's namespace (guarded), the pending set's and, last, the verdict
// cache's gen-f set emptied (genFlushMsg).
func pendingMsgs(table, guarded bool, addrs []netip.Addr) []mdnetlink.Message {
	if !table {
		return nil
	}
	msgs := addrMsgs(PolicyAttached, addrs, unix.NFT_MSG_NEWSETELEM, mdnetlink.Create|mdnetlink.Acknowledge)
	if guarded {
		msgs = append(msgs, addrMsgs(PolicyPending, addrs, unix.NFT_MSG_NEWSETELEM, mdnetlink.Create|mdnetlink.Acknowledge)...)
		msgs = append(msgs, genFlushMsg())
	}
	return msgs
}

// genFlushMsg empties the verdict cache's gen-f set, in the batch of an
// ADD that marks addresses pending: the entry chains accept a connection
// cached at the current generation by gen-f before they check the pending
// set, and by gen after it (policy_entry.go), so once gen-f is empty an
// earlier pod's connection at one of the new pod's addresses meets the
// pending set, and the node's other cached connections pay that check and
// are accepted by gen, as before gen-f, until the agent writes the next
// generation (it does when it takes the addresses out of the pending set:
// a transaction, so a generation). An ADD that marks nothing pending
// leaves gen-f alone. The ADD never writes a generation of its own: the
// agent's next could then be the same value, and a connection judged by
// the rules before the agent's change would stay cached after it.
func genFlushMsg() mdnetlink.Message {
	return pmMsg(unix.NFT_MSG_DELSETELEM, mdnetlink.Acknowledge, attrs(
		mdnetlink.Attribute{Type: unix.NFTA_SET_ELEM_LIST_TABLE, Data: cstr(PolicyTable)},
		mdnetlink.Attribute{Type: unix.NFTA_SET_ELEM_LIST_SET, Data: cstr(policyGenFastSet)},
	))
}

// UnmarkPolicyPending takes addrs out of the attached and pending sets, in
// one transaction (a pod's DEL, or an ADD undone); those not there, or no
// table, are no error.
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
	if _, err := h.delPresentElems(nftables.TableFamilyINet, PolicyTable, setKeys{policySetName(PolicyAttached, false), k4}, setKeys{policySetName(PolicyAttached, true), k6},
		setKeys{policySetName(PolicyPending, false), k4}, setKeys{policySetName(PolicyPending, true), k6}); err != nil {
		return fmt.Errorf("unmark %v pending in %s: %w", addrs, h.where(), classify(err))
	}
	return nil
}

// addrMsgs are the element messages of addrs for address set name's
// family parts.
func addrMsgs(name string, addrs []netip.Addr, msgType int, flags mdnetlink.HeaderFlags) []mdnetlink.Message {
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
		msgs = append(msgs, nftElemMsg(PolicyTable, policySetName(name, false), msgType, flags, v4, false))
	}
	if len(v6) > 0 {
		msgs = append(msgs, nftElemMsg(PolicyTable, policySetName(name, true), msgType, flags, v6, false))
	}
	return msgs
}

// releaseUnattached takes those of closed that are not in the attached set
// out of the pending set: their DEL came before (or while) the agent closed
// them.
func (h *Handle) releaseUnattached(closed []netip.Addr) error {
	var k4, k6 [][]byte
	for _, a := range closed {
		_, err := h.getElem(PolicyTable, policySetName(PolicyAttached, a.Is6()), a.AsSlice())
		switch {
		case err == nil:
			continue
		case !errors.Is(err, unix.ENOENT):
			return fmt.Errorf("read the attached set: %w", err)
		}
		if a.Is4() {
			k4 = append(k4, a.AsSlice())
		} else {
			k6 = append(k6, a.AsSlice())
		}
	}
	_, err := h.delPresentElems(nftables.TableFamilyINet, PolicyTable, setKeys{policySetName(PolicyPending, false), k4}, setKeys{policySetName(PolicyPending, true), k6})
	return err
}
