package nstest_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
)

// TestNDPProber: the prober hears the one host that has the address, and
// none for an address no host has.
func TestNDPProber(t *testing.T) {
	nstest.RequireRoot(t)
	open := func(prefix string) *netops.Handle {
		h, err := netops.Open(nstest.NewNS(t, prefix))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		return h
	}
	a, b := open("ndpa"), open("ndpb")
	host, _, err := a.EnsureVeth(netops.VethOpts{HostName: "veth0", PeerName: "eth0", Peer: b})
	if err != nil {
		t.Fatal(err)
	}
	ip := netip.MustParseAddr("2001:db8::10")
	if err := a.EnsureAddr("veth0", netip.PrefixFrom(ip, 64), netops.AddrOpts{NoDAD: true}); err != nil {
		t.Fatal(err)
	}
	p := nstest.NewNDPProber(t, b.Path(), "eth0")
	got, err := p.Answers(ip, 500*time.Millisecond)
	if err != nil || len(got) != 1 || got[0] != host.MAC.String() {
		t.Errorf("Answers(%s) = %v, %v; want [%s]", ip, got, err, host.MAC)
	}
	if got, err := p.Answers(netip.MustParseAddr("2001:db8::11"), 200*time.Millisecond); err != nil || len(got) != 0 {
		t.Errorf("Answers(an address no host has) = %v, %v; want none", got, err)
	}
}
