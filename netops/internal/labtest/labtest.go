// Package labtest holds the test helpers of netops and netops/nft: a
// namespace with a Handle on it, and a lab of pods on a bridge made the way
// the bridge plugin makes them.
package labtest

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
)

// OpenNS creates a namespace for the test and opens a Handle on it; both are
// released when the test ends.
func OpenNS(t testing.TB, prefix string) *netops.Handle {
	t.Helper()
	path := nstest.NewNS(t, prefix)
	h, err := netops.Open(path)
	if err != nil {
		t.Fatalf("Open(%q): %v", path, err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return h
}

// Must fails the test on err.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Lab is a "host" namespace with a bridge br0 (10.99.0.1/24, fd00:99::1/64)
// and pods attached to it the way the bridge plugin attaches them: pod i
// on port veth<i>, with link-local address netops.PodLinkLocal("veth<i>").
type Lab struct {
	Host *netops.Handle
	Pods []*netops.Handle
}

// PodAddrs are the addresses of pod i of a Lab.
func PodAddrs(i int) (v4, v6 netip.Prefix) {
	return netip.MustParsePrefix(fmt.Sprintf("10.99.0.%d/24", i+2)),
		netip.MustParsePrefix(fmt.Sprintf("fd00:99::%d/64", i+2))
}

// New makes a Lab with pods pods; everything goes when the test ends.
func New(t testing.TB, pods int) *Lab {
	t.Helper()
	l := &Lab{Host: OpenNS(t, "lh")}
	br, err := l.Host.EnsureBridge(netops.BridgeOpts{Name: "br0"})
	Must(t, err)
	Must(t, l.Host.EnsureAddr("br0", netip.MustParsePrefix("10.99.0.1/24"), netops.AddrOpts{}))
	Must(t, l.Host.EnsureAddr("br0", netip.MustParsePrefix("fd00:99::1/64"), netops.AddrOpts{NoDAD: true}))
	for i := range pods {
		pod := OpenNS(t, "lp")
		_, _, err := l.Host.EnsureVeth(netops.VethOpts{
			HostName: fmt.Sprintf("veth%d", i), PeerName: "eth0", Peer: pod, MasterIndex: br.Index,
			IPv6: netops.VethIPv6LinkLocal, // as the bridge role's dual-stack pods: netops.PodLinkLocal("veth<i>")
		})
		Must(t, err)
		v4, v6 := PodAddrs(i)
		Must(t, pod.EnsureAddr("eth0", v4, netops.AddrOpts{}))
		Must(t, pod.EnsureAddr("eth0", v6, netops.AddrOpts{NoDAD: true}))
		Must(t, pod.EnsureRoute(netops.Route{GW: netip.MustParseAddr("10.99.0.1"), Dev: "eth0"}))
		Must(t, pod.EnsureRoute(netops.Route{GW: netip.MustParseAddr("fd00:99::1"), Dev: "eth0"}))
		l.Pods = append(l.Pods, pod)
	}
	return l
}
