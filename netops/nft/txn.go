package nft

import (
	"errors"
	"sync/atomic"

	"github.com/google/nftables"
	mdnetlink "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// txn is one nftables transaction on a Handle's connection, the one way
// every table here changes the kernel: what it queues reaches the kernel in
// one batch on commit, which the kernel applies whole or not at all (an
// error rolls all of it back). The core (core.go) queues a table's
// difference on one. A change is queued one of two ways:
//
//   - with google/nftables' builder (conn, addSet, addBaseChain): tables,
//     chains, rules, sets, maps and verdict maps and their elements, typed;
//   - as raw messages (add): what that builder cannot say, such as an
//     element's timeout, DESTROYSETELEM, or a whole table built by hand
//     (portmap's, the firewall's) sent with elements in one batch.
//
// A txn is of one kind for its life: nftables.Conn keeps its queue to
// itself, so the two cannot share a batch, and commit refuses (aborts) a txn
// that has both rather than send two. After commit the txn is empty and can
// queue the next transaction (a retry after ENOENT, say). A Handle has one
// txn under way at a time.
type txn struct {
	h     *Handle
	built bool                // the builder was handed out: commit flushes its queue
	raw   []mdnetlink.Message // raw messages, each with the ack flag

	// capture, when set, is a quiet transaction's builder, captured the
	// batch it flushes, quiet the table acked last (txn_quiet.go).
	capture  *nftables.Conn
	captured []mdnetlink.Message
	quiet    *nftables.Table
}

// errMixedTxn is commit's refusal of a txn with both kinds of changes.
var errMixedTxn = errors.New("nftables transaction mixes builder and raw messages")

// begin starts a transaction, opening the connection on first use.
func (h *Handle) begin() (*txn, error) {
	if _, err := h.nftConn(); err != nil {
		return nil, err
	}
	return h.tx(), nil
}

// beginChain starts a transaction and reports whether table (of family, an
// NFPROTO_ value) has chain: the check that decides what a table's Ensure
// or Delete has to do.
func (h *Handle) beginChain(family uint8, table, chain string) (*txn, bool, error) {
	t, err := h.begin()
	if err != nil {
		return nil, false, err
	}
	ok, err := h.nftChainExists(family, table, chain)
	return t, ok, err
}

// tx starts a transaction on the connection, which the caller opened.
func (h *Handle) tx() *txn {
	t := &txn{h: h}
	if h.quiet != nil {
		c, err := quietConn(&t.captured)
		if err == nil {
			t.capture, t.quiet = c, h.quiet
		}
	}
	return t
}

// commitRaw sends msgs (each with the ack flag) as one transaction.
func (h *Handle) commitRaw(msgs ...mdnetlink.Message) error {
	return (&txn{h: h, raw: msgs}).commit()
}

// conn returns nftables' builder: what is queued on it is this transaction.
// Reads (GetRules, GetSetElements, ...) on it are sent at once, as always.
func (t *txn) conn() *nftables.Conn {
	t.built = true
	if t.capture != nil {
		return t.capture
	}
	return t.h.nft
}

// add queues raw messages, each with the ack flag.
func (t *txn) add(msgs ...mdnetlink.Message) { t.raw = append(t.raw, msgs...) }

// transactions counts the transactions this process sent (Transactions).
var transactions atomic.Uint64

// Transactions reports how many nftables transactions this process has
// sent, those the kernel refused included. Each costs more than its
// messages: one the kernel refuses waits for its abort (~11 ms here), one
// that deletes leaves cleanup that closing the socket waits for
// (perf-notes). Tests read it to check that a call sends none where it has
// nothing to change (a pod's ADD on a node without the policy table).
func Transactions() uint64 { return transactions.Load() }

// commit sends what was queued as one transaction and waits for the
// kernel's acks; nothing queued is no error.
func (t *txn) commit() error {
	raw := t.raw
	t.raw = nil
	switch {
	case t.built && len(raw) > 0:
		t.abort()
		return errMixedTxn
	case t.built && t.capture != nil:
		return t.commitQuiet(t.quiet)
	case t.built:
		transactions.Add(1)
		return t.h.nft.Flush()
	case len(raw) > 0:
		transactions.Add(1)
		return t.h.sendBatch(raw)
	}
	return nil
}

// abortTable is a table no one makes: deleting it fails, and with it the
// whole batch.
var abortTable = &nftables.Table{Family: nftables.TableFamilyINet, Name: "cnibox-txn-abort"}

// abort drops what the builder queued: nftables.Conn empties its queue only
// by sending it, so it is sent with the delete of a table that does not
// exist, which makes the kernel reject the whole batch. A txn whose build
// failed half-way aborts, so that the next commit does not carry the half.
func (t *txn) abort() {
	if t.capture != nil { // nothing was sent: the builder is dropped
		t.capture, t.captured, t.built = nil, nil, false
		if c, err := quietConn(&t.captured); err == nil {
			t.capture = c
		}
		return
	}
	if !t.built {
		t.raw = nil
		return
	}
	t.h.nft.DelTable(abortTable)
	transactions.Add(1)
	_ = t.h.nft.Flush() // ENOENT: nothing of it was applied
}

// inBatch is msgs between an nftables batch begin and end.
func inBatch(msgs []mdnetlink.Message) []mdnetlink.Message {
	batch := make([]mdnetlink.Message, 0, len(msgs)+2)
	batch = append(batch, mdnetlink.Message{
		Header: mdnetlink.Header{Type: unix.NFNL_MSG_BATCH_BEGIN, Flags: mdnetlink.Request},
		Data:   nfgenmsg(unix.AF_UNSPEC, unix.NFNL_SUBSYS_NFTABLES),
	})
	batch = append(batch, msgs...)
	return append(batch, mdnetlink.Message{
		Header: mdnetlink.Header{Type: unix.NFNL_MSG_BATCH_END, Flags: mdnetlink.Request},
		Data:   nfgenmsg(unix.AF_UNSPEC, unix.NFNL_SUBSYS_NFTABLES),
	})
}

// sendBatch sends msgs between a batch begin and end on the raw socket
// under the connection and collects one ack per message.
func (h *Handle) sendBatch(msgs []mdnetlink.Message) error {
	if _, err := h.nfRaw.SendMessages(inBatch(msgs)); err != nil {
		return err
	}
	var errs []error
	for range msgs {
		if _, err := h.nfRaw.Receive(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// setIDs numbers the sets this process adds (from 1<<24 on: far above the
// numbers nftables would give, so the two never meet in one batch).
var setIDs atomic.Uint32

// addSet is nftables' Conn.AddSet with the set's batch ID given here: the
// library numbers sets from a package counter without a lock, a data race
// when Handles add sets from several goroutines (found by go test -race).
func (t *txn) addSet(s *nftables.Set, elems []nftables.SetElement) error {
	if s.ID == 0 {
		s.ID = 1<<24 + setIDs.Add(1)
	}
	return t.conn().AddSet(s, elems)
}

// addBaseChain adds a base chain with policy accept to table.
func (t *txn) addBaseChain(table *nftables.Table, name string, typ nftables.ChainType, hook *nftables.ChainHook, prio *nftables.ChainPriority) *nftables.Chain {
	policy := nftables.ChainPolicyAccept
	return t.conn().AddChain(&nftables.Chain{
		Name:     name,
		Table:    table,
		Type:     typ,
		Hooknum:  hook,
		Priority: prio,
		Policy:   &policy,
	})
}

// elemChunkBytes bounds the elements of one set element message: their
// list is one netlink attribute, whose length is 16 bits; google/nftables
// puts them all in one, and a list over 64 KiB reaches the kernel cut.
const elemChunkBytes = 48 << 10

// chunkElems splits elems into lists that each fit a message.
func chunkElems(elems []nftables.SetElement) [][]nftables.SetElement {
	var out [][]nftables.SetElement
	start, size := 0, 0
	for i, e := range elems {
		n := len(e.Key) + len(e.Val) + len(e.KeyEnd) + len(e.Comment) + 48
		if e.VerdictData != nil {
			n += len(e.VerdictData.Chain) + 16
		}
		if size+n > elemChunkBytes && i > start {
			out = append(out, elems[start:i])
			start, size = i, 0
		}
		size += n
	}
	if start < len(elems) {
		out = append(out, elems[start:])
	}
	return out
}

// setAddElements queues the add of elems to s, in messages that fit.
func (t *txn) setAddElements(s *nftables.Set, elems []nftables.SetElement) error {
	if t.capture != nil && plainElems(elems) {
		return t.quietAddElements(s, elems) // (services_wire.go)
	}
	for _, c := range chunkElems(elems) {
		if err := t.conn().SetAddElements(s, c); err != nil {
			return err
		}
	}
	return nil
}

// setDeleteElements queues the delete of elems from s, in messages that
// fit.
func (t *txn) setDeleteElements(s *nftables.Set, elems []nftables.SetElement) error {
	for _, c := range chunkElems(elems) {
		if err := t.conn().SetDeleteElements(s, c); err != nil {
			return err
		}
	}
	return nil
}
