package nftfake

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nlenc"
	"github.com/mdlayher/netlink/nltest"
	"golang.org/x/sys/unix"
)

// Kernel is one network namespace's nftables, in memory.
type Kernel struct {
	mu        sync.Mutex
	w         *world        // what is committed
	gen       uint32        // the generation (NFTA_GEN_ID)
	skew      time.Duration // what Advance added to the clock
	unmodeled []error       // messages refused as not modeled (Err)
	batches   int           // committed batches
	// before63, before610: the kernel modeled is older than Linux 6.3
	// (no DESTROY* messages) or 6.10 (no element timeout update): Release.
	before63, before610 bool
}

// New returns an empty Kernel: a kernel of Linux 6.10 or later.
func New() *Kernel { return &Kernel{w: &world{}, gen: 1} }

// Release makes k a kernel of Linux major.minor where that differs from
// the newest: before 6.3 ("netfilter: nf_tables: add DESTROY command")
// every DESTROY* message is EINVAL; before 6.10 ("netfilter: nf_tables:
// set element timeout update support") an element added again without
// NLM_F_EXCL is left as it is, its timeout and expiry too. Debian 12's
// 6.1 lacks both; netops/nft checks for each and falls back (the
// masquerade's delete, portmap's and the masquerade's expiry). It
// returns k.
func (k *Kernel) Release(major, minor int) *Kernel {
	k.mu.Lock()
	defer k.mu.Unlock()
	older := func(ma, mi int) bool { return major < ma || major == ma && minor < mi }
	k.before63, k.before610 = older(6, 3), older(6, 10)
	return k
}

// Dial returns a new socket on k, for nftables.WithTestDial (or
// nltest.Dial): each call is one socket with its own queue of replies.
func (k *Kernel) Dial() nltest.Func {
	s := &socket{k: k}
	return s.do
}

// Advance moves k's clock forward by d: elements whose timeout ends within
// it expire.
func (k *Kernel) Advance(d time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.skew += d
}

// Generation returns the generation id, which each committed batch that
// changed something advances.
func (k *Kernel) Generation() uint32 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.gen
}

// Batches returns how many batches k committed (refused ones not counted).
func (k *Kernel) Batches() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.batches
}

// Err reports the messages k was sent and does not model (nil when none).
func (k *Kernel) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return errors.Join(k.unmodeled...)
}

// now is k's clock; k.mu is held.
func (k *Kernel) now() time.Time { return time.Now().Add(k.skew) }

// socket is one connection to the Kernel: what the Kernel answers waits in
// queue, one datagram per Receive, as the kernel's replies do.
type socket struct {
	k     *Kernel
	mu    sync.Mutex
	queue [][]netlink.Message
}

// errWouldBlock answers a Receive with nothing to read, where a socket
// would block for ever.
var errWouldBlock = errors.New("nftfake: receive with no reply to read (a socket would block)")

func (s *socket) do(req []netlink.Message) ([]netlink.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if req == nil { // a Receive after the replies were read
		if len(s.queue) == 0 {
			return nil, errWouldBlock
		}
		d := s.queue[0]
		s.queue = s.queue[1:]
		return d, nil
	}
	s.queue = s.k.handle(req)
	if len(s.queue) == 0 {
		return nil, nil
	}
	d := s.queue[0]
	s.queue = s.queue[1:]
	return d, nil
}

// nfnlSubsys is NFNL_SUBSYS_NFTABLES in a message type's high byte.
const nfnlSubsys = unix.NFNL_SUBSYS_NFTABLES << 8

// Message types golang.org/x/sys does not name.
const (
	msgDestroyTable   = 0x1a
	msgDestroyChain   = 0x1b
	msgDestroyRule    = 0x1c
	msgDestroySet     = 0x1d
	msgDestroySetElem = 0x1e
	msgDestroyObj     = 0x1f
)

// msgNames names the message types, for errors.
var msgNames = map[int]string{
	unix.NFT_MSG_NEWTABLE: "NFT_MSG_NEWTABLE", unix.NFT_MSG_GETTABLE: "NFT_MSG_GETTABLE", unix.NFT_MSG_DELTABLE: "NFT_MSG_DELTABLE",
	unix.NFT_MSG_NEWCHAIN: "NFT_MSG_NEWCHAIN", unix.NFT_MSG_GETCHAIN: "NFT_MSG_GETCHAIN", unix.NFT_MSG_DELCHAIN: "NFT_MSG_DELCHAIN",
	unix.NFT_MSG_NEWRULE: "NFT_MSG_NEWRULE", unix.NFT_MSG_GETRULE: "NFT_MSG_GETRULE", unix.NFT_MSG_DELRULE: "NFT_MSG_DELRULE",
	unix.NFT_MSG_NEWSET: "NFT_MSG_NEWSET", unix.NFT_MSG_GETSET: "NFT_MSG_GETSET", unix.NFT_MSG_DELSET: "NFT_MSG_DELSET",
	unix.NFT_MSG_NEWSETELEM: "NFT_MSG_NEWSETELEM", unix.NFT_MSG_GETSETELEM: "NFT_MSG_GETSETELEM", unix.NFT_MSG_DELSETELEM: "NFT_MSG_DELSETELEM",
	unix.NFT_MSG_NEWGEN: "NFT_MSG_NEWGEN", unix.NFT_MSG_GETGEN: "NFT_MSG_GETGEN", unix.NFT_MSG_TRACE: "NFT_MSG_TRACE",
	unix.NFT_MSG_NEWOBJ: "NFT_MSG_NEWOBJ", unix.NFT_MSG_GETOBJ: "NFT_MSG_GETOBJ", unix.NFT_MSG_DELOBJ: "NFT_MSG_DELOBJ",
	unix.NFT_MSG_GETOBJ_RESET: "NFT_MSG_GETOBJ_RESET", unix.NFT_MSG_NEWFLOWTABLE: "NFT_MSG_NEWFLOWTABLE",
	unix.NFT_MSG_GETFLOWTABLE: "NFT_MSG_GETFLOWTABLE", unix.NFT_MSG_DELFLOWTABLE: "NFT_MSG_DELFLOWTABLE",
	unix.NFT_MSG_GETRULE_RESET: "NFT_MSG_GETRULE_RESET",

	msgDestroyTable: "NFT_MSG_DESTROYTABLE", msgDestroyChain: "NFT_MSG_DESTROYCHAIN", msgDestroyRule: "NFT_MSG_DESTROYRULE",
	msgDestroySet: "NFT_MSG_DESTROYSET", msgDestroySetElem: "NFT_MSG_DESTROYSETELEM", msgDestroyObj: "NFT_MSG_DESTROYOBJ",
	0x20: "NFT_MSG_DESTROYFLOWTABLE", 0x21: "NFT_MSG_GETSETELEM_RESET",
}

// msgName names message type t.
func msgName(t netlink.HeaderType) string {
	if int(t)>>8 != unix.NFNL_SUBSYS_NFTABLES {
		return fmt.Sprintf("message type %#x (not nftables)", int(t))
	}
	if n, ok := msgNames[int(t)&0xff]; ok {
		return n
	}
	return fmt.Sprintf("nftables message %#x", int(t)&0xff)
}

// kerr is an errno with, for what the fake does not model, a message for
// the extended ack.
type kerr struct {
	errno unix.Errno
	msg   string
}

func (e *kerr) Error() string {
	if e.msg != "" {
		return e.msg
	}
	return e.errno.Error()
}

func errno(n unix.Errno) error { return &kerr{errno: n} }

// refuse refuses message m as not modeled (what names the case), and
// records it for Err.
func (k *Kernel) refuse(m netlink.Message, what string) error {
	e := &kerr{errno: unix.EOPNOTSUPP, msg: fmt.Sprintf("nftfake: %s%s not modeled", msgName(m.Header.Type), what)}
	k.unmodeled = append(k.unmodeled, e)
	return e
}

// handle answers a request: the datagrams the kernel would send back, in
// order.
func (k *Kernel) handle(req []netlink.Message) [][]netlink.Message {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.w.expire(k.now())
	var out [][]netlink.Message
	for i := 0; i < len(req); i++ {
		m := req[i]
		if m.Header.Type == unix.NFNL_MSG_BATCH_BEGIN {
			j := i + 1
			for j < len(req) && req[j].Header.Type != unix.NFNL_MSG_BATCH_END {
				j++
			}
			if j == len(req) { // no end: the kernel drops the batch
				out = append(out, []netlink.Message{ack(m, errno(unix.EINVAL))})
				return out
			}
			out = append(out, k.batch(req[i+1:j])...)
			i = j
			continue
		}
		out = append(out, k.get(m)...)
	}
	return out
}

// ack is the kernel's ack of m: err's errno (0 for nil) and m's header,
// with an extended ack naming what the fake does not model.
func ack(m netlink.Message, err error) netlink.Message {
	var n unix.Errno
	var msg string
	if err != nil {
		var ke *kerr
		if errors.As(err, &ke) {
			n, msg = ke.errno, ke.msg
		} else {
			n, msg = unix.EINVAL, err.Error()
		}
	}
	hdr := make([]byte, 16)
	nlenc.PutUint32(hdr[0:4], uint32(16+len(m.Data)))
	nlenc.PutUint16(hdr[4:6], uint16(m.Header.Type))
	nlenc.PutUint16(hdr[6:8], uint16(m.Header.Flags))
	nlenc.PutUint32(hdr[8:12], m.Header.Sequence)
	nlenc.PutUint32(hdr[12:16], m.Header.PID)
	data := append(nlenc.Int32Bytes(-int32(n)), hdr...)
	flags := netlink.HeaderFlags(0x100) // NLM_F_CAPPED: the request's payload left out
	if msg != "" {
		flags |= 0x200 // NLM_F_ACK_TLVS
		data = append(data, mustAttrs(netlink.Attribute{Type: unix.NLMSGERR_ATTR_MSG, Data: cstr(msg)})...)
	}
	return netlink.Message{
		Header: netlink.Header{Type: netlink.Error, Flags: flags, Sequence: m.Header.Sequence, PID: m.Header.PID},
		Data:   data,
	}
}

// batch applies msgs as one transaction and returns the datagrams of its
// echoes and acks.
func (k *Kernel) batch(msgs []netlink.Message) [][]netlink.Message {
	if len(msgs) == 0 {
		// An empty batch commits nothing and answers nothing (the
		// kernel takes and drops its commit mutex: a barrier).
		return nil
	}
	tx := &txn{k: k, w: k.w.clone(), now: k.now(), setIDs: map[uint32]*set{}, gen: k.gen + 1}
	var acks [][]netlink.Message
	failed := false
	for _, m := range msgs {
		err := tx.apply(m)
		if err != nil {
			failed = true
		}
		if err != nil || m.Header.Flags&netlink.Acknowledge != 0 {
			acks = append(acks, []netlink.Message{ack(m, err)})
		}
	}
	if failed {
		return acks
	}
	tx.w.unbindAnon()
	if tx.changed {
		k.w = tx.w
		k.gen++
		k.batches++
	}
	return append(tx.echo, acks...)
}

// procName is NFTA_GEN_PROC_NAME: the process's name, as the kernel's comm.
var procName = func() string {
	n := filepath.Base(os.Args[0])
	if len(n) > 15 {
		n = n[:15]
	}
	return n
}()
