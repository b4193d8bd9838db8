package netops

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"time"

	"github.com/cnibox/cnibox/netops/internal/kerr"
	"github.com/cnibox/cnibox/netops/internal/nsthread"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// dumpRetries is how many times a netlink dump is repeated when the kernel
// reports that it was interrupted by a concurrent change. Every address or
// link change in the namespace interrupts a dump running at that moment, and
// a node where dozens of ADDs run at once (each new veth gets an IPv6
// link-local address) keeps changing, and under such a storm on Linux 6.1
// five tries back to back were not enough. The tries back off (dumpBackoff,
// doubling up to 50 ms) so the burst can pass.
const dumpRetries = 12

// dumpBackoff is the first pause between two tries of an interrupted dump.
const dumpBackoff = 200 * time.Microsecond

// nlaTypeMask strips the nested and byte-order flags from an attribute type.
const nlaTypeMask = ^uint16(unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)

// Handle is a netlink handle bound to one network namespace, which also
// holds the namespace's nftables side (see NFT). A Handle is not safe for
// concurrent use.
type Handle struct {
	path string
	ns   netns.NsHandle // the namespace; closed (-1) until needed when path is ""
	nlh  *netlink.Handle

	rt    *nl.NetlinkSocket // raw rtnetlink socket for requests the netlink package cannot build; lazy
	rtPid uint32
	rtSeq uint32

	ifindex map[string]int // name -> ifindex of links this handle created or looked up

	nf *nft.Handle // the nftables side, on the same namespace; lazy
}

// Open returns a Handle for the network namespace at nsPath (for example
// /var/run/netns/cni-1234 or /proc/42/ns/net). An empty nsPath means the
// namespace of the calling process (the "host").
func Open(nsPath string) (*Handle, error) {
	h := &Handle{path: nsPath, ns: netns.None()}
	if nsPath == "" {
		nlh, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return nil, fmt.Errorf("open netlink socket: %w", err)
		}
		h.nlh = nlh
		return h, nil
	}
	// Not opened unless it is an nsfs file: opening a FIFO would block.
	if st := (unix.Statfs_t{}); unix.Statfs(nsPath, &st) == nil && st.Type != unix.NSFS_MAGIC {
		return nil, fmt.Errorf("open network namespace %q: %w: not a namespace file", nsPath, ErrNotFound)
	}
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("open network namespace %q: %w (%w)", nsPath, ErrNotFound, err)
		}
		return nil, fmt.Errorf("open network namespace %q: %w", nsPath, err)
	}
	nlh, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("open netlink socket in network namespace %q: %w", nsPath, err)
	}
	h.ns, h.nlh = ns, nlh
	return h, nil
}

// NFT returns the nftables side of the Handle's namespace (the tables
// cnibox owns: masquerade, port mappings, firewall, overlay, bridge fabric),
// made on first use; its connection opens on its first request and stays
// open until Close. A caller that removes nftables state and links (a DEL)
// removes the state first, then the links, and closes last: the nftables
// socket's release, which waits out the kernel's deferred cleanup, then
// finds it done behind the link deletes.
func (h *Handle) NFT() *nft.Handle {
	if h.nf == nil {
		h.nf = nft.Lend(h.path, int(h.ns))
	}
	return h.nf
}

// Close releases the nftables side (see nft.Handle.Close), the netlink
// sockets and the namespace file descriptor. Closing an nftables socket
// after deletions waits for the kernel's deferred cleanup, so callers that
// delete nftables state and links should delete the links before calling
// Close.
func (h *Handle) Close() error {
	var errs []error
	if h.nf != nil {
		if err := h.nf.Close(); err != nil {
			errs = append(errs, err)
		}
		h.nf = nil
	}
	if h.rt != nil {
		h.rt.Close()
		h.rt = nil
	}
	if h.nlh != nil {
		h.nlh.Close()
		h.nlh = nil
	}
	if h.ns.IsOpen() {
		if err := h.ns.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close network namespace %q: %w", h.path, err))
		}
		h.ns = netns.None()
	}
	return errors.Join(errs...)
}

// Path returns the namespace path the Handle was opened with ("" for the
// namespace of the calling process).
func (h *Handle) Path() string { return h.path }

// where names the namespace in error messages.
func (h *Handle) where() string { return kerr.Where(h.path) }

// nsFD returns a file descriptor of the Handle's namespace, opening the
// calling process's namespace on first use when the Handle was opened with "".
func (h *Handle) nsFD() (int, error) {
	if !h.ns.IsOpen() {
		ns, err := netns.Get()
		if err != nil {
			return -1, fmt.Errorf("open current network namespace: %w", err)
		}
		h.ns = ns
	}
	return int(h.ns), nil
}

// inNS runs fn on a locked OS thread that is inside the Handle's namespace.
// It runs fn in the calling goroutine when the Handle is the caller's own
// namespace, and otherwise on a thread of its own that nsthread.Do moves
// into the namespace and back.
func (h *Handle) inNS(fn func() error) error {
	if h.path == "" {
		return fn()
	}
	target := h.ns
	return nsthread.Do(func() error {
		if err := netns.Set(target); err != nil {
			return fmt.Errorf("enter %s: %w", h.where(), err)
		}
		return nil
	}, fn)
}

// rtSocket returns the raw rtnetlink socket, opening it on first use.
func (h *Handle) rtSocket() (*nl.NetlinkSocket, error) {
	if h.rt != nil {
		return h.rt, nil
	}
	target := h.ns
	if h.path == "" {
		target = netns.None() // the caller's namespace: no switch
	}
	s, err := nl.GetNetlinkSocketAt(target, netns.None(), unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("open netlink socket in %s: %w", h.where(), err)
	}
	// Extended acks carry the kernel's explanation of an error; best effort.
	_ = s.SetExtAck(true)
	pid, err := s.GetPid()
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("netlink socket in %s: %w", h.where(), err)
	}
	h.rt, h.rtPid = s, pid
	return s, nil
}

// rtExec sends req on the raw rtnetlink socket and returns the payloads of
// the replies of type want. It reads until the kernel's ack (when requested),
// the end of a dump, or the single reply of a plain get. A dump that the
// kernel marked as interrupted returns its messages and
// netlink.ErrDumpInterrupted.
func (h *Handle) rtExec(req *nl.NetlinkRequest, want uint16) ([][]byte, error) {
	s, err := h.rtSocket()
	if err != nil {
		return nil, err
	}
	h.rtSeq++
	req.Seq = h.rtSeq
	if err := s.Send(req); err != nil {
		return nil, err
	}
	var (
		out  [][]byte
		intr bool
	)
	for {
		msgs, from, err := s.Receive()
		if err != nil {
			return nil, err
		}
		if from.Pid != nl.PidKernel {
			continue
		}
		for _, m := range msgs {
			if m.Header.Seq != req.Seq || m.Header.Pid != h.rtPid {
				continue
			}
			if m.Header.Flags&unix.NLM_F_DUMP_INTR != 0 {
				intr = true
			}
			switch m.Header.Type {
			case unix.NLMSG_DONE, unix.NLMSG_ERROR:
				if err := nlError(m); err != nil {
					return nil, err
				}
				if intr {
					return out, netlink.ErrDumpInterrupted
				}
				return out, nil
			}
			if m.Header.Type == want {
				out = append(out, m.Data)
			}
			if m.Header.Flags&unix.NLM_F_MULTI == 0 && req.Flags&unix.NLM_F_ACK == 0 {
				return out, nil
			}
		}
	}
}

// nlError decodes the error of an NLMSG_ERROR or NLMSG_DONE message, with
// the kernel's extended-ack message when there is one. It returns nil for an
// ack.
func nlError(m syscall.NetlinkMessage) error {
	if len(m.Data) < 4 {
		return nil
	}
	errno := int32(nl.NativeEndian().Uint32(m.Data[0:4]))
	if errno == 0 {
		return nil
	}
	err := error(syscall.Errno(-errno))
	if m.Header.Type != unix.NLMSG_ERROR || m.Header.Flags&unix.NLM_F_ACK_TLVS == 0 {
		return err
	}
	rest := m.Data[4:]
	if len(rest) < unix.SizeofNlMsghdr {
		return err
	}
	// Skip the echoed request: its header only when the kernel capped it.
	skip := unix.SizeofNlMsghdr
	if m.Header.Flags&unix.NLM_F_CAPPED == 0 {
		skip = int(nl.NativeEndian().Uint32(rest[0:4]))
	}
	skip = (skip + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1)
	if skip > len(rest) {
		return err
	}
	attrs, perr := nl.ParseRouteAttr(rest[skip:])
	if perr != nil {
		return err
	}
	for _, a := range attrs {
		if a.Attr.Type&nlaTypeMask == nl.NLMSGERR_ATTR_MSG {
			return fmt.Errorf("%w: %s", err, unix.ByteSliceToString(a.Value))
		}
	}
	return err
}

// retryDump calls dump until it returns something other than
// netlink.ErrDumpInterrupted, at most dumpRetries times.
func retryDump[T any](dump func() (T, error)) (T, error) {
	var (
		v   T
		err error
	)
	pause := dumpBackoff
	for range dumpRetries {
		v, err = dump()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return v, err
		}
		time.Sleep(pause)
		pause = min(2*pause, 50*time.Millisecond)
	}
	return v, err
}
