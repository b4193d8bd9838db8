package kerr

import (
	"fmt"
	"net/netip"
)

// ErrEgressIPv6 is wrapped by the errors of the egress gateway's kernel
// work (netops' addresses and routes, netops/nft's table) about an IPv6
// address: that side of issue 52 is not done yet.
const ErrEgressIPv6 Sentinel = "egress gateways are IPv4 only (IPv6 is not done yet)"

// EgressIPv4 returns a as an IPv4 address, or an error that names a and
// what it is (what, e.g. "egress IP") and wraps ErrEgressIPv6 when a is an
// IPv6 address.
func EgressIPv4(what string, a netip.Addr) (netip.Addr, error) {
	a = a.Unmap()
	switch {
	case a.Is4():
		return a, nil
	case a.Is6():
		return a, fmt.Errorf("%s %s: %w", what, a, ErrEgressIPv6)
	}
	return a, fmt.Errorf("%s: %v is not an address", what, a)
}

// EgressIPv4Prefix is EgressIPv4 for a prefix, which must be valid.
func EgressIPv4Prefix(what string, p netip.Prefix) error {
	if !p.IsValid() {
		return fmt.Errorf("%s %v: not a prefix", what, p)
	}
	_, err := EgressIPv4(what, p.Addr())
	return err
}
