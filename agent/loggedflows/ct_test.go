package loggedflows

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

// nla is a netlink attribute of typ (nested: the flag set) holding v.
func nla(typ uint16, nested bool, v ...[]byte) []byte {
	var body []byte
	for _, b := range v {
		body = append(body, b...)
	}
	if nested {
		typ |= 0x8000
	}
	out := binary.NativeEndian.AppendUint16(nil, uint16(4+len(body)))
	out = binary.NativeEndian.AppendUint16(out, typ)
	out = append(out, body...)
	for len(out)%4 != 0 {
		out = append(out, 0)
	}
	return out
}

// ctTuple is a conntrack entry's attributes with the tuples orig and
// reply of protocol 6 (src, dst).
func ctTuple(orig, reply [2]netip.AddrPort) []byte {
	tuple := func(typ uint16, t [2]netip.AddrPort) []byte {
		s, d := uint16(ctaIPv4Src), uint16(ctaIPv4Dst)
		if t[0].Addr().Is6() {
			s, d = ctaIPv6Src, ctaIPv6Dst
		}
		return nla(typ, true,
			nla(ctaTupleIP, true, nla(s, false, t[0].Addr().AsSlice()), nla(d, false, t[1].Addr().AsSlice())),
			nla(ctaTupleProto, true, nla(1, false, []byte{6}), nla(2, false, binary.BigEndian.AppendUint16(nil, t[0].Port())),
				nla(ctaProtoDstPrt, false, binary.BigEndian.AppendUint16(nil, t[1].Port()))))
	}
	return append(tuple(ctaTupleOrig, orig), tuple(2, reply)...)
}

// TestOrigDst: the original destination is read from a conntrack entry's
// attributes as nflog passes them (nested flags set), both families, and
// the original source is told from a reply's.
func TestOrigDst(t *testing.T) {
	ap := netip.MustParseAddrPort
	for _, c := range []struct{ cli, fe, be netip.AddrPort }{
		{ap("10.99.0.2:40000"), ap("10.96.0.10:8080"), ap("10.99.0.3:80")},
		{ap("[fd00:99::2]:40000"), ap("[fd96::10]:8080"), ap("[fd00:99::3]:80")},
	} {
		ct := ctTuple([2]netip.AddrPort{c.cli, c.fe}, [2]netip.AddrPort{c.be, c.cli})
		if got, ok := origDst(ct); !ok || got != c.fe {
			t.Errorf("origDst = %v, %v; want %v", got, ok, c.fe)
		}
		if !origSrcIs(ct, c.cli.Addr()) || origSrcIs(ct, c.be.Addr()) {
			t.Errorf("origSrcIs: the client %v is the original source, the backend %v is not", c.cli.Addr(), c.be.Addr())
		}
	}
	if _, ok := origDst(nil); ok {
		t.Error("origDst of nothing: ok")
	}
	if _, ok := origDst([]byte{200, 0, 1, 0}); ok {
		t.Error("origDst of a truncated attribute: ok")
	}
}
