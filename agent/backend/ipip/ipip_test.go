package ipip

import (
	"net/netip"
	"testing"

	"github.com/cnibox/cnibox/agent/backend/backendtest"
	"github.com/cnibox/cnibox/agent/lease"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
)

func TestMain(m *testing.M) { nstest.MainInPrivateNetns(m) }

// TestIPIPTwoNodes: flannel.ipip with the underlay's address as local, the
// MTU 20 below the interface's, the subnet's address as a /32; a peer
// routed via its public IP onlink through the tunnel (or, with
// DirectRouting, on the underlay), reachable both ways; a peer removed,
// and a stale route dropped by a sync.
func TestIPIPTwoNodes(t *testing.T) {
	for _, direct := range []bool{false, true} {
		name := map[bool]string{false: "tunnel", true: "direct"}[direct]
		t.Run(name, func(t *testing.T) {
			conf := `{"Network": "10.244.0.0/16", "Backend": {"Type": "ipip"}}`
			if direct {
				conf = `{"Network": "10.244.0.0/16", "Backend": {"Type": "ipip", "DirectRouting": true}}`
			}
			nodes := backendtest.TwoNodes(t, conf)
			var bs [2]*Backend
			for i, n := range nodes {
				b, err := New(n.Env)
				if err != nil {
					t.Fatal(err)
				}
				bs[i] = b
				n.Start(t, b)
			}
			n1, n2 := nodes[0], nodes[1]
			if n1.Lease.Attrs.BackendType != "ipip" || n1.Lease.Attrs.Data != nil {
				t.Errorf("published type %q data %s; want ipip without data", n1.Lease.Attrs.BackendType, n1.Lease.Attrs.Data)
			}
			backendtest.Must(t, bs[0].Add(n1.H, n2.Lease, nil))
			backendtest.Must(t, bs[1].Add(n2.H, n1.Lease, nil))

			l, err := n1.H.LinkByName(Device)
			backendtest.Must(t, err)
			if l.Kind != "ipip" || l.MTU != 1480 || !l.Up || bs[0].MTU() != 1480 {
				t.Errorf("%s: kind %s mtu %d up %v, MTU() %d; want ipip, 1480, up", Device, l.Kind, l.MTU, l.Up, bs[0].MTU())
			}
			addrs, err := n1.H.Addrs(Device)
			backendtest.Must(t, err)
			if len(addrs) != 1 || addrs[0] != netip.MustParsePrefix("10.244.1.0/32") {
				t.Errorf("%s addresses %v; want 10.244.1.0/32", Device, addrs)
			}
			want := netops.Route{Dst: n2.Lease.Subnet, GW: netip.MustParseAddr("192.168.78.2"), Dev: Device, Onlink: true}
			if direct {
				want = netops.Route{Dst: n2.Lease.Subnet, GW: netip.MustParseAddr("192.168.78.2"), Dev: "eth0"}
			}
			all, err := n1.H.Routes("")
			backendtest.Must(t, err)
			if !backendtest.HasRoute(all, want) {
				t.Errorf("routes %v; want %s", all, want)
			}
			for _, pair := range [][2]*backendtest.Node{{n1, n2}, {n2, n1}} {
				if err := backendtest.Reachable(t, pair[0], pair[1], pair[1].Lease.Subnet.Addr()); err != nil {
					t.Fatalf("to %s: %v", pair[1].Lease.Subnet.Addr(), err)
				}
			}
			// A stale route into the cluster network goes with a sync.
			stale := netops.Route{Dst: netip.MustParsePrefix("10.244.9.0/24"), GW: netip.MustParseAddr("192.168.78.9"), Dev: Device, Onlink: true}
			backendtest.Must(t, n1.H.EnsureRoute(stale))
			removed, added, err := bs[0].Sync(n1.H, []lease.Lease{n2.Lease})
			if err != nil || removed != 1 || added != 0 {
				t.Errorf("Sync = removed %d added %d %v; want the stale route removed", removed, added, err)
			}
			backendtest.Must(t, bs[0].Remove(n1.H, n2.Lease))
			all, err = n1.H.Routes("")
			backendtest.Must(t, err)
			if backendtest.HasRoute(all, want) {
				t.Errorf("the route %s is still there after Remove", want)
			}
		})
	}
}
