package netops

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

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
	// A conntrack socket of the Handle's namespace (h.nlh speaks rtnetlink
	// only: its conntrack requests would go to the caller's namespace).
	fd, err := h.nsFD()
	if err != nil {
		return 0, err
	}
	nlh, err := netlink.NewHandleAt(netns.NsHandle(fd), unix.NETLINK_NETFILTER)
	if err != nil {
		return 0, fmt.Errorf("open a conntrack socket in %s: %w", h.where(), err)
	}
	defer nlh.Close()
	var n uint
	for _, fam := range []struct {
		on bool
		f  netlink.InetFamily
	}{{fam4, unix.AF_INET}, {fam6, unix.AF_INET6}} {
		if !fam.on {
			continue
		}
		k, err := nlh.ConntrackDeleteFilters(netlink.ConntrackTable, fam.f, f)
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
