package nft

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	mdnetlink "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The wire side of quiet transactions (txn_quiet.go), which only the
// services table uses: its first sync at 10,000 Services x 4 endpoints is
// ~350,000 set elements (310,000 of them slots) in one batch of ~60 MB.
// google/nftables builds each element as a tree of attributes, each
// marshalled into a slice of its own (six allocations an element, a sixth
// of that sync's CPU with the garbage collection they cause), and
// mdlayher/netlink appends every message of a batch to a buffer it grows
// as it goes (copying the batch ~log2(60 MB) times). Here a plain element
// list (key, and a value or a verdict) is written straight into one
// message, and a quiet batch into one buffer of its size, sent with one
// sendmsg.

// plainElems reports whether every element of elems is a key with at
// most a value or a jump/goto (no interval end, timeout, comment or
// counter): what quietAddElements writes.
func plainElems(elems []nftables.SetElement) bool {
	for _, e := range elems {
		if e.IntervalEnd || len(e.KeyEnd) > 0 || e.Timeout != 0 || e.Comment != "" || e.Counter != nil {
			return false
		}
		if v := e.VerdictData; v != nil && v.Kind != expr.VerdictJump && v.Kind != expr.VerdictGoto {
			return false
		}
	}
	return true
}

// quietAddElements queues the add of elems (plain) to s on a quiet txn:
// what the builder queued so far is captured first, so the order stays
// the order of the calls.
func (t *txn) quietAddElements(s *nftables.Set, elems []nftables.SetElement) error {
	t.built = true
	if err := t.capture.Flush(); err != nil {
		return err
	}
	for _, c := range chunkElems(elems) {
		t.captured = append(t.captured, elemsMessage(s, c))
	}
	return nil
}

// elemsMessage is a NEWSETELEM message adding elems (plain) to s.
func elemsMessage(s *nftables.Set, elems []nftables.SetElement) mdnetlink.Message {
	n := 4 + nlaLen(len(s.Table.Name)+1) + nlaLen(len(s.Name)+1) + 4
	for _, e := range elems {
		n += 4 + 4 + nlaLen(len(e.Key))
		switch {
		case e.VerdictData != nil:
			n += 4 + 4 + nlaLen(4) + nlaLen(len(e.VerdictData.Chain)+1)
		case len(e.Val) > 0:
			n += 4 + nlaLen(len(e.Val))
		}
	}
	b := make([]byte, 0, n)
	b = append(b, byte(s.Table.Family), unix.NFNETLINK_V0, 0, 0)
	b = nlaCString(b, unix.NFTA_SET_ELEM_LIST_TABLE, s.Table.Name)
	b = nlaCString(b, unix.NFTA_SET_ELEM_LIST_SET, s.Name)
	list := len(b)
	b = nlaOpen(b, unix.NFTA_SET_ELEM_LIST_ELEMENTS)
	for i, e := range elems {
		item := len(b)
		b = nlaOpen(b, uint16(i+1))
		key := len(b)
		b = nlaOpen(b, unix.NFTA_SET_ELEM_KEY)
		b = nlaPut(b, unix.NFTA_DATA_VALUE, e.Key)
		b = nlaClose(b, key)
		switch {
		case e.VerdictData != nil:
			data := len(b)
			b = nlaOpen(b, unix.NFTA_SET_ELEM_DATA)
			verdict := len(b)
			b = nlaOpen(b, unix.NFTA_DATA_VERDICT)
			b = nlaPut(b, unix.NFTA_VERDICT_CODE, binary.BigEndian.AppendUint32(nil, uint32(int32(e.VerdictData.Kind))))
			b = nlaCString(b, unix.NFTA_VERDICT_CHAIN, e.VerdictData.Chain)
			b = nlaClose(b, verdict)
			b = nlaClose(b, data)
		case len(e.Val) > 0:
			data := len(b)
			b = nlaOpen(b, unix.NFTA_SET_ELEM_DATA)
			b = nlaPut(b, unix.NFTA_DATA_VALUE, e.Val)
			b = nlaClose(b, data)
		}
		b = nlaClose(b, item)
	}
	b = nlaClose(b, list)
	return mdnetlink.Message{
		Header: mdnetlink.Header{
			Type:  mdnetlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWSETELEM),
			Flags: mdnetlink.Request | mdnetlink.Create,
		},
		Data: b,
	}
}

// nlaLen is the length of an attribute of n bytes of data, padded.
func nlaLen(n int) int { return (4 + n + 3) &^ 3 }

// nlaPut appends an attribute.
func nlaPut(b []byte, typ uint16, data []byte) []byte {
	b = binary.NativeEndian.AppendUint16(b, uint16(4+len(data)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// nlaCString appends an attribute of s and a NUL.
func nlaCString(b []byte, typ uint16, s string) []byte {
	b = binary.NativeEndian.AppendUint16(b, uint16(4+len(s)+1))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(append(b, s...), 0)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// nlaOpen appends a nested attribute's header, its length written by
// nlaClose(b, the offset it was opened at).
func nlaOpen(b []byte, typ uint16) []byte {
	return binary.NativeEndian.AppendUint16(append(b, 0, 0), typ|unix.NLA_F_NESTED)
}

func nlaClose(b []byte, at int) []byte {
	binary.NativeEndian.PutUint16(b[at:], uint16(len(b)-at))
	return b
}

// quietSeq numbers the messages of quiet batches (their answers are
// matched by it).
var quietSeq atomic.Uint32

// sendQuiet sends msgs in one batch, written into one buffer of its
// size, and returns the sequence number of the last of msgs. A test's
// in-memory kernel (h.dial) gets them through the netlink Conn.
func (h *Handle) sendQuiet(msgs []mdnetlink.Message) (uint32, error) {
	batch := inBatch(msgs)
	if h.dial != nil {
		sent, err := h.nfRaw.SendMessages(batch)
		if err != nil {
			return 0, err
		}
		return sent[len(sent)-2].Header.Sequence, nil
	}
	n := 0
	for _, m := range batch {
		n += nlmsgLen(len(m.Data))
	}
	buf := make([]byte, 0, n)
	var last uint32
	for _, m := range batch {
		last = quietSeq.Add(1)
		buf = binary.NativeEndian.AppendUint32(buf, uint32(16+len(m.Data)))
		buf = binary.NativeEndian.AppendUint16(buf, uint16(m.Header.Type))
		buf = binary.NativeEndian.AppendUint16(buf, uint16(m.Header.Flags))
		buf = binary.NativeEndian.AppendUint32(buf, last)
		buf = binary.NativeEndian.AppendUint32(buf, 0) // (pid: the kernel's)
		buf = append(buf, m.Data...)
		for len(buf)%4 != 0 {
			buf = append(buf, 0)
		}
	}
	last-- // (the batch end's is the one after)
	rc, err := h.nfRaw.SyscallConn()
	if err != nil {
		return 0, err
	}
	var serr error
	err = rc.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), buf, nil, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}, 0)
		return serr != unix.EAGAIN
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return 0, fmt.Errorf("sendmsg of %d bytes: %w", len(buf), err)
	}
	return last, nil
}

// nlmsgLen is the length of a netlink message of n bytes of data, padded.
func nlmsgLen(n int) int { return (16 + n + 3) &^ 3 }
