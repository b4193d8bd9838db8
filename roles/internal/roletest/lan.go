package roletest

import (
	"net/netip"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
)

// LAN is a namespace that stands for the LAN behind the node's NIC: a veth
// whose end on the node is lan0 and whose end in the LAN is eth0.
type LAN struct {
	// NS is the LAN namespace's path.
	NS string
	// Node and LAN are handles of the node's namespace and the LAN's,
	// closed at the test's end.
	Node, LAN *netops.Handle
}

// NewLAN makes the LAN namespace and the veth lan0 - eth0 (lan0 deleted at
// the test's end), with lanAddrs on eth0 and nodeAddrs on lan0.
func NewLAN(t testing.TB, lanAddrs, nodeAddrs []string) LAN {
	t.Helper()
	ns := nstest.NewNS(t, "lan")
	l := LAN{NS: ns, Node: Open(t, ""), LAN: Open(t, ns)}
	if _, _, err := l.Node.EnsureVeth(netops.VethOpts{HostName: "lan0", PeerName: "eth0", Peer: l.LAN}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Node.DeleteLink("lan0") })
	for _, a := range []struct {
		h     *netops.Handle
		dev   string
		addrs []string
	}{{l.LAN, "eth0", lanAddrs}, {l.Node, "lan0", nodeAddrs}} {
		for _, p := range a.addrs {
			if err := a.h.EnsureAddr(a.dev, netip.MustParsePrefix(p), netops.AddrOpts{NoDAD: true}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return l
}
