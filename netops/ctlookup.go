package netops

import (
	"fmt"
	"net/netip"

	mdnetlink "github.com/mdlayher/netlink"
	"github.com/ti-mo/conntrack"

	"github.com/cnibox/cnibox/netops/internal/kerr"
	"golang.org/x/sys/unix"
)

// Conntrack looks connections up in the conntrack table of one network
// namespace, one ctnetlink get each (github.com/ti-mo/conntrack). It is
// safe for concurrent use.
type Conntrack struct {
	c     *conntrack.Conn
	where string
}

// OpenConntrack opens a ctnetlink socket in the network namespace at
// nsPath; "" is the namespace of the calling thread (a test that runs it
// inside nstest.Run gets that namespace's table).
func OpenConntrack(nsPath string) (*Conntrack, error) {
	cfg := &mdnetlink.Config{}
	if nsPath != "" {
		fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("open network namespace %q: %w", nsPath, classify(err))
		}
		defer unix.Close(fd) // the socket stays in the namespace
		cfg.NetNS = fd
	}
	c, err := conntrack.Dial(cfg)
	if err != nil {
		return nil, fmt.Errorf("open conntrack socket in %s: %w", kerr.Where(nsPath), err)
	}
	return &Conntrack{c: c, where: kerr.Where(nsPath)}, nil
}

// Close closes the socket.
func (c *Conntrack) Close() error { return c.c.Close() }

// ReplyOrigDst finds the connection of protocol proto (unix.IPPROTO_UDP,
// _TCP) whose reply direction goes from replySrc to replyDst (a local
// socket's own address and its peer's: for a connection DNATed to that
// socket, exactly what the socket sees) and returns its original
// destination, and whether the kernel DNATed it (the original destination
// is then not replySrc). No such connection is an error wrapping
// ErrNotFound.
func (c *Conntrack) ReplyOrigDst(proto uint8, replySrc, replyDst netip.AddrPort) (dst netip.AddrPort, dnat bool, err error) {
	f, err := c.c.Get(conntrack.Flow{TupleReply: conntrack.Tuple{
		IP: conntrack.IPTuple{SourceAddress: replySrc.Addr().Unmap(), DestinationAddress: replyDst.Addr().Unmap()},
		Proto: conntrack.ProtoTuple{
			Protocol: proto, SourcePort: replySrc.Port(), DestinationPort: replyDst.Port(),
		},
	}})
	if err != nil {
		return netip.AddrPort{}, false, fmt.Errorf("look up the connection %s <- %s (protocol %d) in %s: %w", replyDst, replySrc, proto, c.where, classify(err))
	}
	o := f.TupleOrig
	return netip.AddrPortFrom(o.IP.DestinationAddress, o.Proto.DestinationPort), f.Status.DstNAT(), nil
}
