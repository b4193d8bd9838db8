package ipam

import (
	"fmt"
	"net/netip"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/addrmath"
	"github.com/containernetworking/cni/pkg/types"
)

// Range is a part of one subnet that addresses are handed out from:
// [Start, End], never Gateway, the network address or (IPv4) the broadcast
// address.
type Range struct {
	Subnet  netip.Prefix
	Start   netip.Addr // default: network address + 1
	End     netip.Addr // default: IPv4 broadcast - 1, IPv6 the subnet's last address
	Gateway netip.Addr // default: network address + 1
}

// Canonicalize fills in the defaults and validates r, as the reference
// host-local plugin does, and more strictly: subnets with host bits set, a
// range start after its end, or one that includes the network or broadcast
// address are refused. field names r in error messages, e.g.
// "ipam.ranges[0][1]".
func (r *Range) Canonicalize(field string) error {
	f := func(name string) string { return field + "." + name }
	if !r.Subnet.IsValid() {
		return cniplug.ConfError(f("subnet"), "missing: every range needs a subnet, e.g. 10.1.0.0/24 or fd00:1::/64")
	}
	if r.Subnet.Addr().Is4In6() {
		return cniplug.Errorf(types.ErrUnsupportedField, "config field %q: %s is an IPv4-mapped IPv6 subnet, which cnibox does not allocate from: write it as an IPv4 subnet", f("subnet"), r.Subnet)
	}
	if r.Subnet.Addr().IsMulticast() {
		return cniplug.Errorf(types.ErrUnsupportedField, "config field %q: %s is a multicast subnet, which cannot hold interface addresses: use a unicast subnet", f("subnet"), r.Subnet)
	}
	if m := r.Subnet.Masked(); m != r.Subnet {
		return cniplug.ConfError(f("subnet"), "%s has host bits set: did you mean %s?", r.Subnet, m)
	}
	if r.Subnet.Bits() > r.Subnet.Addr().BitLen()-2 {
		min := "/30"
		if r.Subnet.Addr().Is6() {
			min = "/126"
		}
		return cniplug.ConfError(f("subnet"), "%s is too small to allocate from: use a %s or larger", r.Subnet, min)
	}
	network := r.Subnet.Addr()
	last := lastAddr(r.Subnet)
	// The addresses that are never handed out and cannot bound a range.
	first, final := network.Next(), last
	if network.Is4() {
		final = last.Prev()
	}
	for _, p := range []struct {
		name string
		a    *netip.Addr
		def  netip.Addr
	}{
		{"gateway", &r.Gateway, first},
		{"rangeStart", &r.Start, first},
		{"rangeEnd", &r.End, final},
	} {
		if !p.a.IsValid() {
			*p.a = p.def
			continue
		}
		if err := r.checkAddr(f(p.name), *p.a); err != nil {
			return err
		}
		switch {
		case *p.a == network:
			return cniplug.ConfError(f(p.name), "%s is the network address of %s, which is never handed out: use %s or later", *p.a, r.Subnet, first)
		case network.Is4() && *p.a == last:
			return cniplug.ConfError(f(p.name), "%s is the broadcast address of %s, which is never handed out: use %s or earlier", *p.a, r.Subnet, final)
		}
	}
	if r.End.Less(r.Start) {
		return cniplug.ConfError(f("rangeEnd"), "%s is before rangeStart %s: swap them", r.End, r.Start)
	}
	if r.Start == r.End && r.Start == r.Gateway {
		return cniplug.ConfError(f("rangeStart"), "the range %s holds only the gateway, which is never handed out: widen it or move the gateway", r)
	}
	return nil
}

func (r *Range) checkAddr(field string, a netip.Addr) error {
	if a.Zone() != "" || a.Is4In6() {
		return cniplug.Errorf(types.ErrUnsupportedField, "config field %q: %s: zoned and IPv4-mapped addresses are not supported: write a plain address of %s", field, a, r.Subnet)
	}
	if !r.Subnet.Contains(a) {
		return cniplug.ConfError(field, "%s is outside subnet %s: pick an address inside it", a, r.Subnet)
	}
	return nil
}

// Contains reports whether a is in [Start, End].
func (r Range) Contains(a netip.Addr) bool { return inside(a, r.Start, r.End) }

// Overlaps reports whether r and o share an address.
func (r Range) Overlaps(o Range) bool {
	return r.Start.BitLen() == o.Start.BitLen() && !r.End.Less(o.Start) && !o.End.Less(r.Start)
}

// String returns "start-end".
func (r Range) String() string { return fmt.Sprintf("%s-%s", r.Start, r.End) }

// size is the number of addresses in [Start, End].
func (r Range) size() uint64 { return addrmath.Span(r.Start, r.End) }
