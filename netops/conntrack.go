package netops

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// FlushUDPConntrack deletes the conntrack entries of UDP flows whose
// original destination port is one of ports, for IPv4 (v6 false) or IPv6.
// A UDP "connection" that existed before a port mapping (say, packets to a
// host port that nothing answered) would otherwise keep its old, un-NATed
// path until it times out. It returns how many entries it deleted. The
// conntrack table is dumped once, so the cost grows with the number of
// tracked flows of the namespace, as with `conntrack -D`.
func (h *Handle) FlushUDPConntrack(v6 bool, ports []uint16) (uint, error) {
	if len(ports) == 0 {
		return 0, nil
	}
	var filters []netlink.CustomConntrackFilter
	for _, p := range ports {
		f := &netlink.ConntrackFilter{}
		if err := f.AddProtocol(unix.IPPROTO_UDP); err != nil {
			return 0, err
		}
		if err := f.AddPort(netlink.ConntrackOrigDstPort, p); err != nil {
			return 0, err
		}
		filters = append(filters, f)
	}
	nfh, err := h.conntrackHandle()
	if err != nil {
		return 0, err
	}
	defer nfh.Close()
	family := netlink.InetFamily(unix.AF_INET)
	if v6 {
		family = unix.AF_INET6
	}
	n, err := nfh.ConntrackDeleteFilters(netlink.ConntrackTable, family, filters...)
	if err != nil {
		return n, fmt.Errorf("delete UDP conntrack entries of ports %v in %s: %w", ports, h.where(), err)
	}
	return n, nil
}

// RouteDev returns the name of the interface that the Handle's namespace
// routes dst through (like `ip route get`).
func (h *Handle) RouteDev(dst netip.Addr) (string, error) {
	if !dst.IsValid() {
		return "", fmt.Errorf("route to %v: invalid address", dst)
	}
	rs, err := h.nlh.RouteGet(toIP(dst))
	if err != nil {
		return "", fmt.Errorf("route to %s in %s: %w", dst, h.where(), classify(err))
	}
	if len(rs) == 0 || rs[0].LinkIndex == 0 {
		return "", fmt.Errorf("route to %s in %s: %w", dst, h.where(), ErrNotFound)
	}
	l, err := h.nlh.LinkByIndex(rs[0].LinkIndex)
	if err != nil {
		return "", fmt.Errorf("route to %s in %s: interface %d: %w", dst, h.where(), rs[0].LinkIndex, classify(err))
	}
	return l.Attrs().Name, nil
}
