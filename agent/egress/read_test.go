//go:build !nokube

package egress

import (
	"slices"
	"strings"
	"testing"
)

// TestReadIPv6: IPv6 egress addresses and destinations are read; an
// address of a family no destination has, or one that is not an address,
// is named in Invalid with its field.
func TestReadIPv6(t *testing.T) {
	g := Read(&EgressGateway{Spec: GatewaySpec{EgressIPs: []string{"2001:db8:e6::10", "192.0.2.10"},
		DestinationCIDRs: []string{"2001:db8:100::/48", "198.51.100.0/24"}}})
	if len(g.Invalid) != 0 || !slices.Equal(g.IPs, addrs("2001:db8:e6::10", "192.0.2.10")) || len(g.Destinations) != 2 {
		t.Errorf("Read = %+v; want both addresses and both destinations, nothing invalid", g)
	}
	for _, tt := range []struct {
		spec GatewaySpec
		says string
	}{
		{GatewaySpec{EgressIPs: []string{"2001:db8:e6::10"}, DestinationCIDRs: []string{"198.51.100.0/24"}}, "spec.egressIPs[0] 2001:db8:e6::10: spec.destinationCIDRs has no IPv6 CIDR"},
		{GatewaySpec{EgressIPs: []string{"fe80::1%eth0"}}, `spec.egressIPs[0] "fe80::1%eth0"`},
		{GatewaySpec{EgressIPs: []string{"192.0.2.10"}, DestinationCIDRs: []string{"2001:db8::/300"}}, `spec.destinationCIDRs[0] "2001:db8::/300"`},
	} {
		g := Read(&EgressGateway{Spec: tt.spec})
		if !slices.ContainsFunc(g.Invalid, func(s string) bool { return strings.Contains(s, tt.says) }) {
			t.Errorf("Read(%+v).Invalid = %q; want one saying %q", tt.spec, g.Invalid, tt.says)
		}
	}
}
