// Package loggedflows is cnibox-agent's side of the policy flow log: it
// reads the connections the policy table logs with their verdict (NFLOG group
// policymodel.FlowLogGroup, one message per logged packet: a connection's
// first, or any packet of one that is dropped), and hands them on in
// batches as Events; the policy watcher names their policy, rule and pods
// (docs/flowlog.md).
package loggedflows

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync/atomic"
	"time"

	nflog "github.com/florianl/go-nflog/v2"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// Event is one logged verdict as the kernel reported it.
type Event struct {
	Time    time.Time
	Allow   bool
	Counter string // the deciding rule's counter ID (policymodel.LogPrefix)
	Proto   uint8
	Src     netip.AddrPort
	Dst     netip.AddrPort
	// Frontend is where the client sent the connection when a DNAT (a
	// Service's: the services table's) sent it elsewhere, Dst: the
	// original destination of its conntrack entry. Zero when the
	// connection was not DNATed, or the packet is not of the original
	// direction.
	Frontend netip.AddrPort
}

// queueLen is how many events wait for the consumer at most: past it,
// events are counted as lost, never queued (a flood of denied SYNs costs
// a count, not memory).
const queueLen = 4096

// The kernel's batching of the log's messages (qThresh messages, or after
// qTimeout hundredths of a second) and the socket's receive buffer.
// Measured with bench-policy's flood (docs/benchmarks.md): one message a
// wake-up (qThresh 1) wrote 10,902 of the ~20,000 verdicts a second.
const (
	qThresh    = 64
	qTimeout   = 10 // 100 ms
	readBuffer = 4 << 20
)

// Reader reads the verdict log of one network namespace.
type Reader struct {
	nf     *nflog.Nflog
	events chan Event
	// stop ends the socket's receive goroutine (Run's return, Close).
	stop context.CancelFunc
	// lost counts the events dropped: the queue full, or the kernel's
	// buffer overrun (ENOBUFS: it dropped an unknown number; counted once).
	lost atomic.Uint64
	// frontends: the kernel passes each message's conntrack entry
	// (Event.Frontend is known).
	frontends bool
}

// Open binds to the verdict log group in the namespace at nsPath ("": the
// caller's): what the kernel logs from its return on is read, and waits
// in the queue for Run.
func Open(nsPath string) (*Reader, error) {
	cfg := &nflog.Config{
		Group:    policymodel.FlowLogGroup,
		Copymode: nflog.CopyPacket,
		Bufsize:  128, // the log rules' snaplen is less
		// The kernel sends a batch of up to qThresh messages at once, or
		// what it holds after qTimeout: one socket wake-up for many
		// verdicts under a flood, and a lone denied connection still on
		// the log within the second.
		QThresh: qThresh,
		Timeout: qTimeout,
		// Each message carries the packet's conntrack entry: its
		// original destination names the Service a DNATed connection
		// went to (Event.Frontend).
		Flags: nflog.FlagConntrack,
	}
	if nsPath != "" {
		f, err := os.Open(nsPath)
		if err != nil {
			return nil, fmt.Errorf("flow log: %w", err)
		}
		defer f.Close() // netlink.Dial enters it and leaves
		cfg.NetNS = int(f.Fd())
	}
	nf, err := nflog.Open(cfg)
	if err != nil {
		return nil, fmt.Errorf("flow log: open NFLOG group %d: %w", policymodel.FlowLogGroup, err)
	}
	ctx, stop := context.WithCancel(context.Background())
	r := &Reader{nf: nf, events: make(chan Event, queueLen), stop: stop, frontends: true}
	// Bind the group now, not in Run: a verdict the kernel logs before
	// the bind reaches no one, and a connection's first packet is the
	// only one an allowed connection logs. Events wait in the queue
	// until Run reads them.
	err = nf.RegisterWithErrorFunc(ctx, r.hook, r.onErr(ctx))
	if errors.Is(err, unix.EOPNOTSUPP) {
		// A kernel without CONFIG_NETFILTER_NETLINK_GLUE_CT cannot pass
		// the conntrack entry: the log without it (no Frontend).
		r.Close()
		cfg.Flags = 0
		if nf, err = nflog.Open(cfg); err != nil {
			return nil, fmt.Errorf("flow log: open NFLOG group %d: %w", policymodel.FlowLogGroup, err)
		}
		ctx, stop = context.WithCancel(context.Background())
		r = &Reader{nf: nf, events: make(chan Event, queueLen), stop: stop}
		err = nf.RegisterWithErrorFunc(ctx, r.hook, r.onErr(ctx))
	}
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("flow log: bind NFLOG group %d: %w", policymodel.FlowLogGroup, err)
	}
	// Room for bursts while the agent is busy: past it the kernel drops
	// and the reader counts ENOBUFS as lost. Not fatal where a limit
	// (net.core.rmem_max) caps it: the kernel keeps its default.
	_ = nf.Con.SetReadBuffer(readBuffer)
	return r, nil
}

// Close stops reading; Run closes the Reader when it returns.
func (r *Reader) Close() {
	r.stop()
	r.nf.Close()
}

// hook queues one logged verdict, or counts it lost when the queue is full.
func (r *Reader) hook(a nflog.Attribute) int {
	ev, ok := parse(a)
	if !ok {
		return 0
	}
	select {
	case r.events <- ev:
	default:
		r.lost.Add(1)
	}
	return 0
}

// onErr counts the kernel's buffer overruns and ends the receive loop
// once ctx is done.
func (r *Reader) onErr(ctx context.Context) nflog.ErrorFunc {
	return func(err error) int {
		if errors.Is(err, unix.ENOBUFS) {
			r.lost.Add(1)
			return 0
		}
		if ctx.Err() != nil {
			return 1
		}
		return 0 // a message it could not read: go on
	}
}

// Frontends reports whether the events carry the frontend of a DNATed
// connection: the kernel passes the conntrack entry with each message
// (CONFIG_NETFILTER_NETLINK_GLUE_CT, which Debian's kernels have); without
// it Event.Frontend is always zero.
func (r *Reader) Frontends() bool { return r.frontends }

// Lost returns the number of events lost so far.
func (r *Reader) Lost() uint64 { return r.lost.Load() }

// Run hands batches of the events read since Open to handle (from one
// goroutine, in order) until ctx ends. It closes the Reader when it
// returns.
func (r *Reader) Run(ctx context.Context, handle func([]Event)) error {
	defer r.Close()
	batch := make([]Event, 0, 256)
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-r.events:
			batch = append(batch[:0], ev)
		drain:
			for len(batch) < cap(batch) {
				select {
				case ev := <-r.events:
					batch = append(batch, ev)
				default:
					break drain
				}
			}
			handle(batch)
		}
	}
}

// parse reads one log message: its prefix (ours, or it is not ours) and
// the packet's addresses, protocol and ports.
func parse(a nflog.Attribute) (Event, bool) {
	if a.Prefix == nil || a.Payload == nil {
		return Event{}, false
	}
	allow, counter, ok := policymodel.ParseLogPrefix(*a.Prefix)
	if !ok {
		return Event{}, false
	}
	ev := Event{Allow: allow, Counter: counter, Time: time.Now()}
	if a.Timestamp != nil {
		ev.Time = *a.Timestamp
	}
	p := *a.Payload
	var src, dst netip.Addr
	var l4 []byte
	switch {
	case len(p) >= 20 && p[0]>>4 == 4:
		ihl := int(p[0]&0x0f) * 4
		src, dst = netip.AddrFrom4([4]byte(p[12:16])), netip.AddrFrom4([4]byte(p[16:20]))
		ev.Proto = p[9]
		if ihl >= 20 && len(p) >= ihl {
			l4 = p[ihl:]
		}
	case len(p) >= 40 && p[0]>>4 == 6:
		src, dst = netip.AddrFrom16([16]byte(p[8:24])), netip.AddrFrom16([16]byte(p[24:40]))
		ev.Proto = p[6] // extension headers are not followed: no ports then
		l4 = p[40:]
	default:
		return Event{}, false
	}
	var sp, dp uint16
	switch ev.Proto {
	case unix.IPPROTO_TCP, unix.IPPROTO_UDP, unix.IPPROTO_SCTP:
		if len(l4) >= 4 {
			sp, dp = binary.BigEndian.Uint16(l4[0:2]), binary.BigEndian.Uint16(l4[2:4])
		}
	}
	ev.Src, ev.Dst = netip.AddrPortFrom(src, sp), netip.AddrPortFrom(dst, dp)
	if a.Ct != nil {
		if fe, ok := origDst(*a.Ct); ok && fe.Addr().Unmap() != dst && origSrcIs(*a.Ct, src) {
			ev.Frontend = netip.AddrPortFrom(fe.Addr().Unmap(), fe.Port())
		}
	}
	return ev, true
}
