package nft

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/nftables"
	mdnetlink "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Quiet transactions: a batch of very many messages (the services
// table's first sync: hundreds of thousands of chains, rules and sets)
// sent with one ack, for its last message, instead of one per message,
// and without the echo of each rule that google/nftables asks for.
// The kernel queues every ack of a batch before the sender reads one, and
// each costs the socket's receive buffer most of a kilobyte: 150,000 of
// them overflow any buffer a node should give (ENOBUFS, and the outcome
// unknown). Errors are always answered, ack or not; the last message, an
// add of the batch's table (no error when it is there, and run by the
// kernel even after an error, to report every one), is always acked, so
// its ack ends the answers.
//
// A Handle with quiet set gives quiet transactions (tx): the builder
// (conn) then queues on a Conn of its own whose Flush captures the batch,
// and commit sends it on the raw socket.

// quietWait bounds the reads of a quiet transaction's answers.
const quietWait = 10 * time.Second

// quietConn returns a builder Conn whose batches land in *captured.
func quietConn(captured *[]mdnetlink.Message) (*nftables.Conn, error) {
	return nftables.New(nftables.WithTestDial(func(req []mdnetlink.Message) ([]mdnetlink.Message, error) {
		var acks []mdnetlink.Message
		for _, m := range req {
			t := m.Header.Type
			if t == unix.NFNL_MSG_BATCH_BEGIN || t == unix.NFNL_MSG_BATCH_END {
				continue
			}
			*captured = append(*captured, m)
			if m.Header.Flags&mdnetlink.Acknowledge != 0 {
				acks = append(acks, mdnetlink.Message{
					Header: mdnetlink.Header{Type: mdnetlink.Error, Sequence: m.Header.Sequence, PID: m.Header.PID},
					Data:   make([]byte, 4+16), // error 0 and the request's header
				})
			}
		}
		return acks, nil
	}))
}

// commitQuiet sends what t's quiet builder queued, with table's add last,
// as one batch acked at its end.
func (t *txn) commitQuiet(table *nftables.Table) error {
	t.capture.AddTable(table)
	if err := t.capture.Flush(); err != nil {
		t.captured = nil
		return err
	}
	msgs := t.captured
	t.captured = nil
	for i := range msgs {
		// Neither acks nor echoes (google/nftables asks the kernel to
		// echo each rule added, for its handle: as many answers again).
		msgs[i].Header.Flags &^= mdnetlink.Acknowledge | mdnetlink.Echo
		msgs[i].Header.Sequence, msgs[i].Header.PID = 0, 0
	}
	msgs[len(msgs)-1].Header.Flags |= mdnetlink.Acknowledge
	transactions.Add(1)
	h := t.h
	last, err := h.sendQuiet(msgs) // (services_wire.go)
	if err != nil {
		h.reopen()
		return fmt.Errorf("send %d nftables messages: %w", len(msgs), err)
	}
	// The kernel ran the batch in the send: its answers are all queued,
	// and a read that waits is one for an answer that is not coming.
	// (A test's in-memory kernel answers at once, and has no deadlines.)
	if h.dial == nil {
		if err := h.nfRaw.SetReadDeadline(time.Now().Add(quietWait)); err != nil {
			return err
		}
		defer h.nfRaw.SetReadDeadline(time.Time{})
	}
	var errs []error
	for {
		replies, err := h.nfRaw.Receive()
		if err != nil {
			errs = append(errs, err)
			var ne interface{ Timeout() bool }
			if errors.Is(err, unix.ENOBUFS) || (errors.As(err, &ne) && ne.Timeout()) {
				h.reopen() // what it still holds is no later request's
				return errors.Join(errs...)
			}
			continue
		}
		for _, m := range replies {
			if m.Header.Sequence == last {
				return errors.Join(errs...)
			}
		}
	}
}
