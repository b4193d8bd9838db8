package loggedflows

import (
	"encoding/binary"
	"net/netip"
)

// The conntrack attributes the log's messages carry (nflog's
// NFULNL_CFG_F_CONNTRACK: the packet's conntrack entry as ctnetlink
// writes it, linux/netfilter/nfnetlink_conntrack.h).
const (
	ctaTupleOrig   = 1 // nested: the original direction's tuple
	ctaTupleIP     = 1 // nested: the tuple's addresses
	ctaTupleProto  = 2 // nested: the tuple's protocol and ports
	ctaIPv4Src     = 1
	ctaIPv4Dst     = 2
	ctaIPv6Src     = 3
	ctaIPv6Dst     = 4
	ctaProtoDstPrt = 3 // big endian
	nlaTypeMask    = 0x3fff
)

// attrs calls f with the type (flags masked) and value of each netlink
// attribute of b, until f returns false or b ends.
func attrs(b []byte, f func(typ uint16, v []byte) bool) {
	for len(b) >= 4 {
		n := int(binary.NativeEndian.Uint16(b))
		if n < 4 || n > len(b) {
			return
		}
		if !f(binary.NativeEndian.Uint16(b[2:])&nlaTypeMask, b[4:n]) {
			return
		}
		n = (n + 3) &^ 3
		if n >= len(b) {
			return
		}
		b = b[n:]
	}
}

// attr is the value of b's attribute typ (nil: none).
func attr(b []byte, typ uint16) []byte {
	var out []byte
	attrs(b, func(t uint16, v []byte) bool {
		if t == typ {
			out = v
			return false
		}
		return true
	})
	return out
}

// origDst is the destination of the original direction of the conntrack
// entry ct (the address and port the client sent to, before a DNAT); ok
// false when ct does not say.
func origDst(ct []byte) (netip.AddrPort, bool) {
	tuple := attr(ct, ctaTupleOrig)
	ip := attr(tuple, ctaTupleIP)
	var a netip.Addr
	if v := attr(ip, ctaIPv4Dst); len(v) == 4 {
		a = netip.AddrFrom4([4]byte(v))
	} else if v := attr(ip, ctaIPv6Dst); len(v) == 16 {
		a = netip.AddrFrom16([16]byte(v))
	} else {
		return netip.AddrPort{}, false
	}
	var port uint16
	if v := attr(attr(tuple, ctaTupleProto), ctaProtoDstPrt); len(v) == 2 {
		port = binary.BigEndian.Uint16(v)
	}
	return netip.AddrPortFrom(a, port), true
}

// origSrcIs reports whether the original direction of the conntrack
// entry ct comes from src: the logged packet is of that direction (a
// reply's destination is the client, not a frontend).
func origSrcIs(ct []byte, src netip.Addr) bool {
	ip := attr(attr(ct, ctaTupleOrig), ctaTupleIP)
	if v := attr(ip, ctaIPv4Src); len(v) == 4 {
		return netip.AddrFrom4([4]byte(v)) == src
	}
	if v := attr(ip, ctaIPv6Src); len(v) == 16 {
		return netip.AddrFrom16([16]byte(v)) == src
	}
	return false
}
