package nft

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// policyState is what the policy table holds now, by name.
type policyState struct {
	exists bool
	*policyObjs
	pending4, pending6 map[netip.Addr]bool
	attached           []netip.Addr // read for a full sync only
}

// policyObjs are the policy table's chains, sets and counters by name.
// Only the agent's Handle makes or deletes them (a CNI call changes
// elements), so after a commit the Handle knows them (Handle.policyObjs)
// and reads them again only for a full sync or after a failure.
type policyObjs struct {
	chains, sets, counters map[string]bool
}

func newPolicyObjs() *policyObjs {
	return &policyObjs{chains: map[string]bool{}, sets: map[string]bool{}, counters: map[string]bool{}}
}

// readPolicy reads whether the policy table exists and, with objects, its
// chains, sets and counters (those this Handle committed last unless full),
// with pending its pending addresses (an element-only change needs neither
// dump). The transaction updates st.policyObjs to what it leaves.
func (h *Handle) readPolicy(objects, full, withPending bool) (*policyState, error) {
	st := &policyState{policyObjs: newPolicyObjs()}
	if tb, _ := h.nft.ListTableOfFamily(PolicyTable, policyFamily); tb == nil {
		h.policyObjs = nil
		return st, nil
	}
	st.exists = true
	if withPending {
		var err error
		if st.pending4, err = h.policyAddrs(PolicyPending, false); err != nil {
			return nil, err
		}
		if st.pending6, err = h.policyAddrs(PolicyPending, true); err != nil {
			return nil, err
		}
	}
	if !objects {
		return st, nil
	}
	if h.policyObjs != nil && !full {
		st.policyObjs = h.policyObjs
		return st, nil
	}
	chains, err := h.nft.ListChainsOfTableFamily(policyFamily)
	if err != nil {
		return nil, fmt.Errorf("list chains: %w", err)
	}
	for _, c := range chains {
		if c.Table.Name == PolicyTable {
			st.chains[c.Name] = true
		}
	}
	sets, err := h.nft.GetSets(policyTableObj())
	if err != nil {
		return nil, fmt.Errorf("list sets: %w", err)
	}
	for _, s := range sets {
		st.sets[s.Name] = true
	}
	objs, err := h.nft.GetObjects(policyTableObj())
	if err != nil {
		return nil, fmt.Errorf("list counters: %w", err)
	}
	for _, o := range objs {
		if c, ok := o.(*nftables.CounterObj); ok {
			st.counters[c.Name] = true
		}
	}
	return st, nil
}

// policyAddrs reads the addresses of an address set's family part.
func (h *Handle) policyAddrs(name string, v6 bool) (map[netip.Addr]bool, error) {
	out := map[netip.Addr]bool{}
	elems, err := h.dumpElems(PolicyTable, policySetName(name, v6))
	if err != nil {
		return nil, err
	}
	for _, e := range elems {
		if a, ok := netip.AddrFromSlice(e.key); ok {
			out[a] = true
		}
	}
	return out, nil
}

func (h *Handle) applyPolicy(c *PolicyChange) error {
	t, err := h.begin()
	if err != nil {
		return err
	}
	objects := c.Full || c.Rules != nil || len(c.Sets)+len(c.DelSets) > 0
	st, err := h.readPolicy(objects, c.Full, len(c.Resolved) > 0)
	if err != nil {
		return err
	}
	if !st.exists && !c.Full {
		return fmt.Errorf("no policy table (a full sync makes it): %w", ErrNotFound)
	}
	if err := h.readGen(); err != nil {
		return err
	}
	if c.Full && st.exists {
		for _, v6 := range []bool{false, true} {
			m, err := h.policyAddrs(PolicyAttached, v6)
			if err != nil {
				return err
			}
			for a := range m {
				st.attached = append(st.attached, a)
			}
		}
	}
	if c.Rules != nil {
		if err := checkPolicyRules(c.Rules); err != nil {
			return err
		}
	}
	if err := h.bigBatches(); err != nil {
		return err
	}
	h.policyObjs = nil // until the commit: st.policyObjs changes as it is queued
	if err := t.queuePolicy(c, st); err != nil {
		t.abort()
		h.policyFP, h.policyGen = nil, 0
		return err
	}
	err = t.commit()
	if errors.Is(err, unix.ENOBUFS) {
		err = h.committedDespite(t.policyGen, err)
	}
	if err != nil {
		h.policyFP, h.policyGen = nil, 0 // the kernel's chains are unknown again
		return err
	}
	h.policyGen = t.policyGen
	if objects {
		h.policyObjs = st.policyObjs
	}
	if c.Rules != nil {
		h.policyFP = t.policyFP
	}
	if len(t.closed) > 0 {
		if err := h.releaseUnattached(t.closed); err != nil {
			return fmt.Errorf("release closed addresses: %w", err)
		}
	}
	return nil
}

// queuePolicy queues c on t, st being the table as it is. The kernel
// checks each message of a transaction against what the messages before
// it made, so the steps come in this order:
//
//  1. The table, and the pending and attached sets (a CNI ADD writes to
//     them: they are never deleted, only made if missing).
//  2. If the rules changed: the counters they name that are new, the
//     flow log's meter sets if they log (policy_logmeter.go), then a
//     flush of every chain whose rules this change does not keep (a
//     flushed chain no longer refers to a set or a counter).
//  3. The sets of c.Sets: made, or flushed and refilled if they exist.
//  4. Elements added to and removed from sets that stay (c.Add, c.Del).
//  5. The guard set (the namespaces where a policy could select a pod).
//  6. The pending set: the resolved addresses out, the closed ones in.
//  7. The generation sets (readGen), and the fast path's reset
//     (fastpath.go: a new generation takes every connection out of it).
//  8. The chains and their rules: the chains first, the base chains
//     hooked last (a jump needs its target), chains no rule uses deleted,
//     then the counters no rule uses.
//  9. The sets no rule uses any more (after 2 and 8, which dropped the
//     rules that looked them up), the meter sets where nothing logs.
func (t *txn) queuePolicy(c *PolicyChange, st *policyState) error {
	cc := t.conn()
	tb := cc.AddTable(policyTableObj())
	for _, v6 := range []bool{false, true} {
		if err := t.addSet(policySetObj(PolicyPending, policymodel.Addrs, "pods the agent has not resolved: dropped", v6), nil); err != nil {
			return err
		}
		if err := t.addSet(policySetObj(PolicyAttached, policymodel.Addrs, "pods between their CNI ADD and DEL", v6), nil); err != nil {
			return err
		}
		st.sets[policySetName(PolicyPending, v6)], st.sets[policySetName(PolicyAttached, v6)] = true, true
	}
	var pc *policyChains
	keep := map[string]bool{}
	dels := map[string]bool{} // sets deleted last
	if c.Rules != nil {
		var counters []string
		t.policyPrev = t.h.policyFP
		if c.Full || !st.exists {
			t.policyPrev = nil
		}
		pc, counters = renderPolicy(c.Rules, func(chain, key string) bool {
			return st.chains[chain] && t.policyPrev != nil && t.policyPrev[chain] == "src\n"+key
		})
		for _, n := range counters {
			keep[n] = true
			if !st.counters[n] {
				cc.AddObj(&nftables.CounterObj{Table: tb, Name: n})
				st.counters[n] = true
			}
		}
		if err := t.queueLogSets(c.Rules.Log, st, dels); err != nil {
			return err
		}
		// Chains this Handle wrote as they are now are left alone; the
		// others are flushed (and refilled or deleted below).
		t.policyFP = fingerprints(pc)
		for name := range st.chains {
			if !t.policyKeeps(name) {
				cc.FlushChain(&nftables.Chain{Table: tb, Name: name})
			}
		}
	}
	for _, s := range c.Sets {
		name := string(s.ID)
		if err := t.addPolicySet(s, st.sets[policySetName(name, false)]); err != nil {
			return err
		}
		st.sets[policySetName(name, false)], st.sets[policySetName(name, true)] = true, true
	}
	for _, s := range c.Add {
		if err := t.policyElemChange(string(s.ID), s.Kind, s.Elems(), true); err != nil {
			return err
		}
	}
	for _, s := range c.Del {
		if err := t.policyElemChange(string(s.ID), s.Kind, s.Elems(), false); err != nil {
			return err
		}
	}
	if c.Guard != nil {
		if err := t.queueGuard(c.Guard); err != nil {
			return err
		}
		st.sets[policyGuardSet] = true
	}
	var gone []netip.Addr
	resolved := make(map[netip.Addr]bool, len(c.Resolved))
	for _, a := range c.Resolved {
		resolved[a] = true
		if st.pending4[a] || st.pending6[a] {
			gone = append(gone, a)
		}
	}
	if err := t.policyElemChange(PolicyPending, policymodel.Addrs, addrElems(gone), false); err != nil {
		return err
	}
	for _, a := range append(c.ToPending, st.attached...) {
		if !resolved[a] {
			resolved[a] = true // once
			t.closed = append(t.closed, a)
		}
	}
	if err := t.policyElemChange(PolicyPending, policymodel.Addrs, addrElems(t.closed), true); err != nil {
		return err
	}
	if err := t.queueGen(); err != nil {
		return err
	}
	if _, err := t.queueFastPathReset(); err != nil {
		return err
	}
	for _, n := range policyGenSets {
		st.sets[n] = true
	}
	if pc != nil {
		t.queuePolicyChains(pc, st)
		for n := range st.counters {
			if !keep[n] {
				cc.DeleteObject(&nftables.CounterObj{Table: tb, Name: n})
				delete(st.counters, n)
			}
		}
	}
	for _, n := range c.DelSets {
		dels[policySetName(string(n), false)], dels[policySetName(string(n), true)] = true, true
	}
	if c.Full {
		want := map[string]bool{policySetName(PolicyPending, false): true, policySetName(PolicyPending, true): true,
			policySetName(PolicyAttached, false): true, policySetName(PolicyAttached, true): true,
			policyGuardSet: c.Guard != nil}
		for _, n := range policyGenSets {
			want[n] = true
		}
		for _, s := range policyLogSets() {
			want[s.Name] = logOn(c.Rules.Log)
		}
		for _, s := range c.Sets {
			want[policySetName(string(s.ID), false)], want[policySetName(string(s.ID), true)] = true, true
		}
		for n := range st.sets {
			dels[n] = dels[n] || !want[n]
		}
	}
	for n, del := range dels {
		if del && st.sets[n] {
			cc.DelSet(&nftables.Set{Table: tb, Name: n})
			delete(st.sets, n)
		}
	}
	return nil
}

// queuePolicyChains queues the base chains, the chains and rules of pc,
// and the deletion of the chains no longer used (all were flushed).
func (t *txn) queuePolicyChains(pc *policyChains, st *policyState) {
	cc := t.conn()
	tb := policyTableObj()
	want := map[string]bool{}
	chains := map[string]*nftables.Chain{}
	for _, n := range pc.names {
		want[n] = true
		if !t.policyKeeps(n) || !st.chains[n] {
			chains[n] = cc.AddChain(&nftables.Chain{Table: tb, Name: n})
		}
	}
	// Hooked last: a jump needs its chain made first.
	for _, b := range policyBaseChains {
		want[b.name] = true
		if t.policyKeeps(b.name) && st.chains[b.name] {
			continue
		}
		ch := t.addBaseChain(tb, b.name, nftables.ChainTypeFilter, nftables.ChainHookRef(b.hook), nftables.ChainPriorityRef(b.prio))
		for _, e := range baseRules(b.to) {
			cc.AddRule(&nftables.Rule{Table: tb, Chain: ch, Exprs: e})
		}
	}
	for _, n := range pc.names {
		if chains[n] == nil {
			continue
		}
		for _, e := range pc.rules[n] {
			cc.AddRule(&nftables.Rule{Table: tb, Chain: chains[n], Exprs: e})
		}
	}
	for n := range st.chains {
		if !want[n] {
			cc.DelChain(&nftables.Chain{Table: tb, Name: n})
			delete(st.chains, n)
		}
	}
	for n := range want {
		st.chains[n] = true
	}
}

// committedDespite answers a transaction whose acks overflowed the
// socket's receive buffer (ENOBUFS, err): the kernel applied the batch
// whole or refused it whole, and the acks that would say which are lost.
// So the table says: the connection, with what is left of the acks in it,
// is closed and opened again, and the batch was committed if the table
// holds the generation gen it wrote (every transaction writes a new one).
// It returns nil if so, else err with what the table holds.
func (h *Handle) committedDespite(gen uint32, err error) error {
	h.reopen()
	if _, cerr := h.nftConn(); cerr != nil {
		return errors.Join(err, cerr)
	}
	h.policyGen = 0
	if rerr := h.readGen(); rerr != nil {
		return errors.Join(err, rerr)
	}
	if h.policyGen == gen {
		return nil
	}
	return fmt.Errorf("%w: the acks overflowed, and the table holds generation %d, not the transaction's %d: it was not applied", err, h.policyGen, gen)
}

// policyRcvBuf is the receive buffer of the policy table's connection: the
// kernel's acks of a batch, one per message, come back in one go. A batch
// whose acks do not fit is read as committedDespite says.
var policyRcvBuf = policySndBuf / 4

// policySndBuf is the send buffer the policy table's transactions may
// need: a full sync of a large cluster is one batch, which the kernel takes
// in one sendmsg, and the default buffer (net.core.wmem_default, ~208 KiB)
// refuses it with EMSGSIZE. nft raises it the same way (SO_SNDBUFFORCE).
const policySndBuf = 64 << 20

// bigBatches raises the connection's send buffer to policySndBuf (and its
// receive buffer, for the acks), once.
func (h *Handle) bigBatches() error {
	if h.bigSndBuf {
		return nil
	}
	rc, err := h.nfRaw.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, policySndBuf)
		if serr == nil {
			// The kernel's acks, one per message, come back in one go.
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, policyRcvBuf)
		}
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("raise the nftables socket buffers: %w", serr)
	}
	h.bigSndBuf = true
	return nil
}

// policyKeeps reports whether chain name is in the kernel as this change
// wants it (written so by this Handle's last change of the rules).
func (t *txn) policyKeeps(name string) bool {
	if t.policyPrev == nil {
		return false
	}
	old, ok := t.policyPrev[name]
	return ok && old == t.policyFP[name]
}
