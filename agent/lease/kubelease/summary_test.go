//go:build !nokube

package kubelease

import (
	"encoding/json"
	"net"
	"net/netip"
	"testing"

	"github.com/cnibox/cnibox/agent/lease"
)

// The watch delivers a node's lease again only when its summary changes:
// equal leases summarize alike, and a change of any field that programs
// the peer changes the summary.
func TestLeaseSummary(t *testing.T) {
	base := func() lease.Lease {
		return lease.Lease{Subnet: netip.MustParsePrefix("10.1.2.0/24"), Subnet6: netip.MustParsePrefix("fd00:1:2::/64"),
			Attrs: lease.Attrs{PublicIP: netip.MustParseAddr("192.0.2.7"), PublicIPv6: netip.MustParseAddr("2001:db8::7"), BackendType: "vxlan",
				VNI: 1, VTEPMAC: net.HardwareAddr{0x0a, 0, 0, 0, 0, 1}, VNI6: 1, VTEPMAC6: net.HardwareAddr{0x0a, 0, 0, 0, 0, 2}}}
	}
	if a, b := summarize(base()), summarize(base()); a != b {
		t.Fatal("equal leases summarize differently")
	}
	for name, change := range map[string]func(*lease.Lease){
		"subnet":     func(l *lease.Lease) { l.Subnet = netip.MustParsePrefix("10.1.3.0/24") },
		"subnet6":    func(l *lease.Lease) { l.Subnet6 = netip.Prefix{} },
		"publicIP":   func(l *lease.Lease) { l.Attrs.PublicIP = netip.MustParseAddr("192.0.2.8") },
		"publicIPv6": func(l *lease.Lease) { l.Attrs.PublicIPv6 = netip.Addr{} },
		"type":       func(l *lease.Lease) { l.Attrs.BackendType = "host-gw" },
		"vni":        func(l *lease.Lease) { l.Attrs.VNI = 2 },
		"vtep mac":   func(l *lease.Lease) { l.Attrs.VTEPMAC = net.HardwareAddr{0x0a, 0, 0, 0, 0, 3} },
		"vni6":       func(l *lease.Lease) { l.Attrs.VNI6 = 3 },
		"vtep mac6":  func(l *lease.Lease) { l.Attrs.VTEPMAC6 = nil },
		"data": func(l *lease.Lease) {
			l.Attrs.BackendType, l.Attrs.Data = "wireguard", json.RawMessage(`{"PublicKey":"x"}`)
		},
	} {
		l := base()
		change(&l)
		if summarize(l) == summarize(base()) {
			t.Errorf("a change of %s keeps the summary: the peer would not be reprogrammed", name)
		}
	}
}
