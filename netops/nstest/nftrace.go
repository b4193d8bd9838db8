package nstest

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Which rule of which table dropped a packet: nftables' tracing (what `nft
// monitor trace` shows), for a test that must say what stopped each
// packet it sent, also where the rules keep no counter.

// nfDrop is the kernel's NF_DROP verdict.
const nfDrop = 0

// TraceEvent is one event of nftables' tracing: a verdict (or a chain's
// return or policy) a traced packet met.
type TraceEvent struct {
	ID           uint32 // the packet's (the kernel's hash of its buffer)
	Family       byte   // the table's (unix.NFPROTO_*)
	Table, Chain string
	Handle       uint64 // the rule's
	Type         uint32 // unix.NFT_TRACETYPE_*
	Verdict      int32  // the rule's verdict, or the chain's policy
	// Header is the start of the packet's network header (the kernel
	// dumps 40 bytes of it, 20 of the transport's after an IPv4 header
	// of 20), as the first event of its walk through a base chain has it.
	Header []byte
}

// Dropped reports whether e is a rule or a chain's policy that dropped
// the packet.
func (e TraceEvent) Dropped() bool {
	return (e.Type == unix.NFT_TRACETYPE_RULE || e.Type == unix.NFT_TRACETYPE_POLICY) && e.Verdict == nfDrop
}

func (e TraceEvent) String() string {
	return fmt.Sprintf("table %d %s chain %s rule %d verdict %d", e.Family, e.Table, e.Chain, e.Handle, e.Verdict)
}

// NFTrace keeps the trace events of the packets that come in on some
// interfaces of a namespace.
type NFTrace struct {
	in *inbox[TraceEvent]
}

// TraceNFT keeps, until the test ends, what nftables' tracing reports in
// the namespace at nsPath of the packets mark marks for it (meta nftrace
// set 1: a table of the caller's, at prerouting before any other; the
// caller's because only netops/nft imports google/nftables outside
// tests). mark runs once TraceNFT listens.
func TraceNFT(t testing.TB, nsPath string, mark func() error) *NFTrace {
	t.Helper()
	c := listenIn(t, nsPath, func() (*netlink.Conn, error) {
		c, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
		if err != nil {
			return nil, err
		}
		if err := c.SetReadBuffer(8 << 20); err != nil {
			c.Close()
			return nil, err
		}
		if err := c.JoinGroup(unix.NFNLGRP_NFTRACE); err != nil {
			c.Close()
			return nil, fmt.Errorf("join the nftables trace group: %w", err)
		}
		return c, nil
	})
	if err := mark(); err != nil {
		t.Fatalf("mark the packets to trace in %s: %v", nsPath, err)
	}
	tr := &NFTrace{in: newInbox[TraceEvent]()}
	go func() {
		headers := map[uint32][]byte{} // a packet's, by its ID
		for {
			msgs, err := c.Receive()
			if err != nil {
				if oe, ok := err.(*netlink.OpError); ok && oe.Err == unix.ENOBUFS {
					continue // events lost: a test that misses one sends again
				}
				return
			}
			for _, m := range msgs {
				e, ok := parseTrace(m)
				if !ok {
					continue
				}
				if e.Header != nil {
					headers[e.ID] = e.Header
				} else {
					e.Header = headers[e.ID]
				}
				tr.in.add(e)
			}
		}
	}()
	return tr
}

// parseTrace reads a trace event out of m; ok is false for another
// message.
func parseTrace(m netlink.Message) (e TraceEvent, ok bool) {
	if m.Header.Type != netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_TRACE) || len(m.Data) < 4 {
		return e, false
	}
	e.Family = m.Data[0]
	ad, err := netlink.NewAttributeDecoder(m.Data[4:])
	if err != nil {
		return e, false
	}
	ad.ByteOrder = binary.BigEndian
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_TRACE_TABLE:
			e.Table = ad.String()
		case unix.NFTA_TRACE_CHAIN:
			e.Chain = ad.String()
		case unix.NFTA_TRACE_RULE_HANDLE:
			e.Handle = ad.Uint64()
		case unix.NFTA_TRACE_TYPE:
			e.Type = ad.Uint32()
		case unix.NFTA_TRACE_ID:
			e.ID = ad.Uint32()
		case unix.NFTA_TRACE_POLICY:
			e.Verdict = int32(ad.Uint32())
		case unix.NFTA_TRACE_NETWORK_HEADER:
			e.Header = append([]byte(nil), ad.Bytes()...)
		case unix.NFTA_TRACE_VERDICT:
			ad.Nested(func(nd *netlink.AttributeDecoder) error {
				nd.ByteOrder = binary.BigEndian
				for nd.Next() {
					if nd.Type() == unix.NFTA_VERDICT_CODE {
						e.Verdict = int32(nd.Uint32())
					}
				}
				return nil
			})
		}
	}
	return e, ad.Err() == nil
}

// Drop waits up to wait for an event that dropped a packet whose network
// header match accepts, among those since the trace started, and returns
// it.
func (tr *NFTrace) Drop(match func(header []byte) bool, wait time.Duration) (TraceEvent, bool) {
	var found TraceEvent
	ok := tr.in.seen(0, func(e TraceEvent) bool {
		if e.Dropped() && e.Header != nil && match(e.Header) {
			found = e
			return true
		}
		return false
	}, wait)
	return found, ok
}

// Events are the events so far.
func (tr *NFTrace) Events() []TraceEvent { return tr.in.all() }
