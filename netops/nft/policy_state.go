package nft

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// policyTable is what the policy table learned about the kernel on one
// Handle's connection (stateOf: the table's state is its own, not fields
// of the Handle). Only the agent's Handle makes or deletes the table's
// chains, sets and counters (a CNI call changes elements), so after a
// commit it knows them, and a change reads them again only after a
// failure; the full sync dumps the table whatever it knows
// (policy_full.go).
type policyTable struct {
	// bufs: this connection's socket buffers were raised for the
	// table's large transactions (bigBatches).
	bufs bool
	// fp: the chains as this Handle last wrote them (fingerprints), nil
	// when unknown.
	fp map[string]chainFP
	// objs: the chains, sets and counters as this Handle last committed
	// them, nil when unknown (policy_apply.go).
	objs *policyObjs
	// gen: the table's generation (policy_gen.go), 0 when unknown.
	gen uint32
	// audits: the full syncs this Handle made, which pick the slice of
	// the marked chains the next one reads all the same (policyAudit).
	audits int
	// rulesKeys: rulesKey of each policy of the last rules rendered (a
	// model's policy never changes: a new one replaces it), so that a
	// change renders the keys of the policies it brings, not of every
	// policy of the node again (a third of a delta's render at 400).
	rulesKeys map[*policymodel.Policy]string
	// The maps a delta's render fills, kept empty for the next delta's:
	// scratch's chains (emptied after the delta), keysSpare for
	// rulesKeys' next, fpSpare for fp's next (fp itself is read by the
	// next delta's render, and rulesKeys too). A delta is ~3,500 chain
	// names at 400 policies: their maps made anew were a third of its
	// bytes; kept full between deltas, they held 1.9 MiB of chains.
	scratch   *policyChains
	keysSpare map[*policymodel.Policy]string
	fpSpare   map[string]chainFP
}

// spareFP is a map for a delta's fingerprints: not fp, which the delta
// compares with. Handed out once.
func (pt *policyTable) spareFP() map[string]chainFP {
	m := pt.fpSpare
	pt.fpSpare = nil
	return m
}

// setFP makes fp, a new map or spareFP's (never fp itself), the chains as
// this Handle wrote them, keeping the map it replaces for the next delta
// (spareFP).
func (pt *policyTable) setFP(fp map[string]chainFP) {
	if pt.fp != nil {
		clear(pt.fp) // its room kept
		pt.fpSpare = pt.fp
	}
	pt.fp = fp
}

// policyOf is h's policyTable.
func policyOf(h *Handle) *policyTable { return stateOf[policyTable](h) }

// forget drops what pt knows of the kernel's table (after a failure, or
// the table deleted): the next change reads it again.
func (pt *policyTable) forget() { pt.fp, pt.objs, pt.gen = nil, nil, 0 }

// policyTxn is a transaction on the policy table: a txn and what it
// writes.
type policyTxn struct {
	*txn
	pt *policyTable
	// fp and prev: the chains this transaction writes and those the
	// Handle wrote last.
	fp, prev map[string]chainFP
	// gen: the generation this transaction writes.
	gen uint32
	// closed: addresses this transaction puts in the pending set for pods
	// the model lost (PolicyChange.ToPending).
	closed []netip.Addr
	// marksFlushed: the chain marks' set is flushed (unmark); unmarks
	// and remarks: the marks of the chains flushed and filled, queued
	// together (queueUnmarks, queueRemarks).
	marksFlushed     bool
	unmarks, remarks []nftables.SetElement
}

// committedDespite answers a transaction whose acks overflowed the
// socket's receive buffer (ENOBUFS, err): the kernel applied the batch
// whole or refused it whole, and the acks that would say which are lost.
// So the table says: the connection, with what is left of the acks in it,
// is closed and opened again, and the batch was committed if the table
// holds the generation gen it wrote (every transaction writes a new one).
// It returns nil if so, else err with what the table holds.
func (h *Handle) committedDespite(gen uint32, err error) error {
	pt := policyOf(h)
	h.reopen()
	pt.bufs = false // a new socket
	if _, cerr := h.nftConn(); cerr != nil {
		return errors.Join(err, cerr)
	}
	pt.gen = 0
	if rerr := h.readGen(); rerr != nil {
		return errors.Join(err, rerr)
	}
	if pt.gen == gen {
		return nil
	}
	return fmt.Errorf("%w: the acks overflowed, and the table holds generation %d, not the transaction's %d: it was not applied", err, pt.gen, gen)
}

// commitPolicy commits t, reading an overflow of its acks from the table
// (committedDespite).
func (t *policyTxn) commitPolicy() error {
	err := t.commit()
	if errors.Is(err, unix.ENOBUFS) {
		err = t.h.committedDespite(t.gen, err)
	}
	return err
}

// policyRcvBuf is the receive buffer of the policy table's connection: the
// kernel's acks of a batch, one per message, come back in one go. A batch
// whose acks do not fit is read as committedDespite says.
var policyRcvBuf = policySndBuf / 4

// policySndBuf is the send buffer the policy table's transactions may
// need: a change of a large cluster's rules is one batch, which the kernel
// takes in one sendmsg, and the default buffer (net.core.wmem_default,
// ~208 KiB) refuses it with EMSGSIZE. nft raises it the same way
// (SO_SNDBUFFORCE). A full sync's transactions are cut well below it
// (policyChunk).
const policySndBuf = 64 << 20

// bigBatches raises the connection's send buffer to policySndBuf (and its
// receive buffer, for the acks), once per connection (none on a test's
// in-memory kernel).
func (h *Handle) bigBatches() error {
	pt := policyOf(h)
	if pt.bufs || h.dial != nil {
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
	pt.bufs = true
	return nil
}
