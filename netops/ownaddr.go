package netops

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// NotOwn says why an address the kernel takes as local is not one of the
// node's own addresses (see OwnAddr); Own (0) says it is.
type NotOwn int

// The answers of OwnAddr, in the order it asks.
const (
	Own NotOwn = iota
	// NotLocal: the kernel does not take the address as local at all
	// (IsLocalAddr is false).
	NotLocal
	// LoopbackRange: in 127.0.0.0/8 but not 127.0.0.1, where the node's
	// services listen (systemd-resolved's stub on 127.0.0.53).
	LoopbackRange
	// NoDevice: local through a route only (a `local` route of an AnyIP
	// setup); no device holds the address.
	NoDevice
	// ServiceDevice: on a device that holds addresses of services: a
	// dummy, kube-proxy's kube-ipvs0, NodeLocal DNSCache's nodelocaldns.
	ServiceDevice
	// LinkLocal: in 169.254.0.0/16 or fe80::/10, where node-local services
	// listen (NodeLocal DNSCache's 169.254.20.10, a cloud's metadata).
	LinkLocal
	// OnLoopback: an address on lo other than 127.0.0.1 and ::1 (anycast
	// addresses and VIPs).
	OnLoopback
	// Secondary: an IPv4 address the kernel made secondary (in the subnet
	// of an address the device had before): a VIP of keepalived, kube-vip.
	Secondary
	// HostBeside: a /32 (or /128) on a device that also holds a wider
	// address of that family (link-local ones aside): a VIP.
	HostBeside
)

// The device names that hold other services' addresses,
// whatever their kind: kube-proxy's IPVS mode puts every Service address on
// kube-ipvs0, NodeLocal DNSCache binds its address on nodelocaldns. Both are
// dummy devices where the kernel has them; the names are checked too.
// serviceDevice says what the device name is (ok false: none of them); a
// switch, not a map: no code at start-up (TestNoInitCode).
func serviceDevice(name string) (why string, ok bool) {
	switch name {
	case "kube-ipvs0":
		return "kube-proxy's IPVS device: every Service address of the cluster is there", true
	case "nodelocaldns":
		return "NodeLocal DNSCache's device", true
	}
	return "", false
}

// NodeAddr is OwnAddr's answer about an address.
type NodeAddr struct {
	Addr   netip.Addr
	NotOwn NotOwn       // Own, or why not
	Link   string       // the device that holds Addr ("" when none)
	Kind   string       // Link's kind ("dummy", "bridge", ...; "" for lo)
	Prefix netip.Prefix // Addr as configured on Link (192.0.2.10/24)
	Beside netip.Prefix // Secondary, HostBeside: the device's address it is held beside
}

// Own reports whether the address is one of the node's own.
func (n NodeAddr) Own() bool { return n.NotOwn == Own }

// Why says, for a person, why the address is not one of the node's own
// ("" when it is), naming the device that holds it.
func (n NodeAddr) Why() string {
	switch n.NotOwn {
	case Own:
		return ""
	case NotLocal:
		return "the node does not take it as local: no device of the node holds it and no local route covers it"
	case LoopbackRange:
		return "it is in the loopback range 127.0.0.0/8 but not 127.0.0.1: the node's own services listen on such addresses (systemd-resolved's stub resolver on 127.0.0.53)"
	case NoDevice:
		return "no device of the node holds it: it is local only through a local route (an AnyIP setup), which serves some other service"
	case ServiceDevice:
		if why, ok := serviceDevice(n.Link); ok {
			return fmt.Sprintf("it is on %s (%s)", n.Link, why)
		}
		return fmt.Sprintf("it is on %s, a %s device: such devices hold the addresses of services (kube-proxy's kube-ipvs0, NodeLocal DNSCache's nodelocaldns, VIPs)", n.Link, n.Kind)
	case LinkLocal:
		return fmt.Sprintf("it is a link-local address (169.254.0.0/16, fe80::/10) on %s: node-local services listen on these (NodeLocal DNSCache's 169.254.20.10, a cloud's metadata service)", n.Link)
	case OnLoopback:
		return fmt.Sprintf("it is on %s beside 127.0.0.1: addresses on the loopback device are anycast or service addresses (VIPs)", n.Link)
	case Secondary:
		of := ""
		if n.Beside.IsValid() {
			of = " (in the subnet of its " + n.Beside.String() + ")"
		}
		return fmt.Sprintf("it is a secondary address of %s%s: a virtual IP a service holds (keepalived, kube-vip)", n.Link, of)
	case HostBeside:
		return fmt.Sprintf("it is a /%d on %s beside its %s: a virtual IP a service holds (kube-vip, keepalived)", n.Prefix.Bits(), n.Link, n.Beside)
	}
	return fmt.Sprintf("not the node's own (reason %d)", int(n.NotOwn))
}

// OwnAddr reports whether a is one of the node's own addresses in the
// Handle's namespace (the node's), and if not, why: an address of one of
// its devices that no other service holds. The rule, in order:
//
//   - the kernel must take a as local (IsLocalAddr); an IPv6 link-local
//     address, which has no route without its zone, is judged by the device
//     that holds it;
//   - 127.0.0.1 and ::1 are the node's; the rest of 127.0.0.0/8 is not;
//   - a device must hold a (not only a local route);
//   - that device is not a dummy, kube-ipvs0 or nodelocaldns;
//   - a is not link-local (169.254.0.0/16, fe80::/10);
//   - a is not on lo;
//   - a is not an IPv4 secondary address (IFA_F_SECONDARY);
//   - a is not a /32 (/128) on a device that also holds a wider address of
//     its family (a VIP beside the device's own address; a device whose
//     only address is a /32, as on some clouds, keeps it).
//
// When several devices hold a, it is the node's if one of them says so;
// otherwise the answer names the first.
func (h *Handle) OwnAddr(a netip.Addr) (NodeAddr, error) {
	a = a.Unmap()
	n := NodeAddr{Addr: a}
	local, err := h.IsLocalAddr(a)
	if err != nil {
		return n, err
	}
	// An IPv6 link-local address without a zone has no route: it is
	// judged by the device that holds it, if any.
	ll6 := a.Is6() && a.IsLinkLocalUnicast()
	switch {
	case !local && !ll6:
		n.NotOwn = NotLocal
		return n, nil
	case a == netip.AddrFrom4([4]byte{127, 0, 0, 1}) || a == netip.IPv6Loopback():
		return n, nil
	case a.Is4() && a.IsLoopback():
		n.NotOwn = LoopbackRange
		return n, nil
	}
	family := netlink.FAMILY_V4
	if a.Is6() {
		family = netlink.FAMILY_V6
	}
	list, err := retryDump(func() ([]netlink.Addr, error) { return h.nlh.AddrList(nil, family) })
	if err != nil {
		return n, fmt.Errorf("list addresses in %s: %w", h.where(), classify(err))
	}
	first := NodeAddr{Addr: a, NotOwn: NoDevice}
	for _, la := range list {
		p, ok := fromIPNet(la.IPNet)
		if !ok || p.Addr() != a {
			continue
		}
		l, err := h.linkByIndex(la.LinkIndex)
		if err != nil {
			return n, err
		}
		got := judgeAddr(NodeAddr{Addr: a, Link: l.Name, Kind: l.Kind, Prefix: p}, la, list)
		if got.Own() {
			return got, nil
		}
		if first.NotOwn == NoDevice {
			first = got
		}
	}
	if !local && first.NotOwn == NoDevice {
		first.NotOwn = NotLocal
	}
	return first, nil
}

// judgeAddr fills in n.NotOwn (and n.Beside) for the address la of the
// device n.Link, the namespace's addresses of that family being all.
func judgeAddr(n NodeAddr, la netlink.Addr, all []netlink.Addr) NodeAddr {
	a := n.Addr
	if _, ok := serviceDevice(n.Link); ok || n.Kind == "dummy" {
		n.NotOwn = ServiceDevice
		return n
	}
	if a.IsLinkLocalUnicast() {
		n.NotOwn = LinkLocal
		return n
	}
	if n.Link == "lo" {
		n.NotOwn = OnLoopback
		return n
	}
	var wider netip.Prefix
	for _, o := range all {
		p, ok := fromIPNet(o.IPNet)
		if !ok || o.LinkIndex != la.LinkIndex || p.Addr() == a || p.Addr().IsLinkLocalUnicast() {
			continue
		}
		if a.Is4() && la.Flags&unix.IFA_F_SECONDARY != 0 && o.Flags&unix.IFA_F_SECONDARY == 0 && p.Masked().Contains(a) {
			n.NotOwn, n.Beside = Secondary, p
			return n
		}
		if !wider.IsValid() && p.Bits() < p.Addr().BitLen() {
			wider = p
		}
	}
	if a.Is4() && la.Flags&unix.IFA_F_SECONDARY != 0 {
		n.NotOwn = Secondary
		return n
	}
	if n.Prefix.Bits() == a.BitLen() && wider.IsValid() {
		n.NotOwn, n.Beside = HostBeside, wider
	}
	return n
}

// linkByIndex asks for the interface with index idx with one RTM_GETLINK.
func (h *Handle) linkByIndex(idx int) (Link, error) {
	req := nl.NewNetlinkRequest(unix.RTM_GETLINK, 0)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(idx)
	req.AddData(msg)
	msgs, err := h.rtExec(req, unix.RTM_NEWLINK)
	if err == nil && len(msgs) == 0 {
		err = unix.ENODEV
	}
	if err != nil {
		return Link{}, fmt.Errorf("get link %d in %s: %w", idx, h.where(), classify(err))
	}
	l, err := parseLink(msgs[0])
	if err != nil {
		return Link{}, fmt.Errorf("get link %d in %s: %w", idx, h.where(), err)
	}
	return l, nil
}
