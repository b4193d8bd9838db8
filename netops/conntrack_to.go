package netops

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// conntrackHandle opens a conntrack (netfilter netlink) socket in the
// Handle's namespace: h.nlh speaks rtnetlink only, and its conntrack
// requests would go to the caller's namespace. The caller closes it.
func (h *Handle) conntrackHandle() (*netlink.Handle, error) {
	var (
		nfh *netlink.Handle
		err error
	)
	if h.path == "" {
		nfh, err = netlink.NewHandle(unix.NETLINK_NETFILTER)
	} else {
		nfh, err = netlink.NewHandleAt(h.ns, unix.NETLINK_NETFILTER)
	}
	if err != nil {
		return nil, fmt.Errorf("open conntrack socket in %s: %w", h.where(), err)
	}
	return nfh, nil
}

// DeleteConntrackTo deletes the UDP and SCTP conntrack entries whose reply
// comes from one of eps (a connection translated to that endpoint, or
// made to it directly): the Services proxy's cleanup when endpoints leave
// (nft.ServicesOptions.ClearConntrack), without which a UDP client keeps
// sending to a dead endpoint (DNS to a CoreDNS that is gone) until its
// entry times out. TCP entries are left: a TCP client learns of a dead
// peer by itself. It returns how many entries went; none is no error.
func (h *Handle) DeleteConntrackTo(eps []netip.AddrPort) (uint, error) {
	if len(eps) == 0 {
		return 0, nil
	}
	f := conntrackTo{eps: map[netip.AddrPort]bool{}}
	fam4, fam6 := false, false
	for _, ep := range eps {
		ep = netip.AddrPortFrom(ep.Addr().Unmap(), ep.Port())
		f.eps[ep] = true
		fam4, fam6 = fam4 || ep.Addr().Is4(), fam6 || ep.Addr().Is6()
	}
	nfh, err := h.conntrackHandle()
	if err != nil {
		return 0, err
	}
	defer nfh.Close()
	var n uint
	for _, fam := range []struct {
		on bool
		f  netlink.InetFamily
	}{{fam4, unix.AF_INET}, {fam6, unix.AF_INET6}} {
		if !fam.on {
			continue
		}
		k, err := nfh.ConntrackDeleteFilters(netlink.ConntrackTable, fam.f, f)
		n += k
		if err != nil {
			return n, fmt.Errorf("delete the conntrack entries of %v in %s: %w", eps, h.where(), err)
		}
	}
	return n, nil
}

// conntrackTo matches UDP and SCTP flows whose reply source is one of eps.
type conntrackTo struct{ eps map[netip.AddrPort]bool }

func (c conntrackTo) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	if p := flow.Forward.Protocol; p != unix.IPPROTO_UDP && p != unix.IPPROTO_SCTP {
		return false
	}
	a, ok := netip.AddrFromSlice(flow.Reverse.SrcIP)
	return ok && c.eps[netip.AddrPortFrom(a.Unmap(), flow.Reverse.SrcPort)]
}
