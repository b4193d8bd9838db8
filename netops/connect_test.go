package netops_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nstest"
)

func TestPodsReachEachOther(t *testing.T) {
	l := labtest.New(t, 2)
	for _, family := range []string{"v4", "v6"} {
		t.Run(family, func(t *testing.T) {
			a4, a6 := labtest.PodAddrs(0)
			b4, b6 := labtest.PodAddrs(1)
			a, b := a4.Addr(), b4.Addr()
			if family == "v6" {
				a, b = a6.Addr(), b6.Addr()
			}
			srv := nstest.Serve(t, l.Pods[1].Path(), b)
			if got := nstest.SeenFrom(t, l.Pods[0].Path(), srv); got != a {
				t.Errorf("pod 1 saw a connection from %v, want %v", got, a)
			}
		})
	}
}

// TestBridgeIPv6ForwardToFirstPod: a node forwards IPv6 from another host to
// the first pod of a new bridge at once. The kernel sends no neighbour
// solicitation for a packet it forwards while the bridge has no usable
// link-local address (its own comes when the first port brings the carrier
// up, and stays tentative for 1 to 2 s): the first packets from another
// node failed with "no route to host" (seen as a flaky dual-stack overlay
// test) until EnsureBridge gave the bridges it creates a link-local address
// without DAD.
func TestBridgeIPv6ForwardToFirstPod(t *testing.T) {
	l := labtest.New(t, 1)
	host := nstest.Netlink(t, l.Host.Path())
	br, err := host.LinkByName("br0")
	must(t, err)
	addrs, err := host.AddrList(br, netlink.FAMILY_V6)
	must(t, err)
	var usable []string
	for _, a := range addrs {
		if a.IP.IsLinkLocalUnicast() && a.Flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) == 0 {
			usable = append(usable, a.String())
		}
	}
	if len(usable) == 0 {
		t.Errorf("br0 has no usable IPv6 link-local address right after its first port: %v", addrs)
	}

	remote := openNS(t, "lr")
	_, _, err = l.Host.EnsureVeth(netops.VethOpts{HostName: "up0", PeerName: "eth0", Peer: remote})
	must(t, err)
	must(t, l.Host.EnsureAddr("up0", netip.MustParsePrefix("fd00:98::1/64"), netops.AddrOpts{NoDAD: true}))
	must(t, remote.EnsureAddr("eth0", netip.MustParsePrefix("fd00:98::2/64"), netops.AddrOpts{NoDAD: true}))
	must(t, remote.EnsureRoute(netops.Route{Dst: netip.MustParsePrefix("fd00:99::/64"), GW: netip.MustParseAddr("fd00:98::1"), Dev: "eth0"}))
	must(t, l.Host.SetSysctl("net.ipv6.conf.all.forwarding", "1"))
	// A new link drops what it sends until the kernel has handled the event
	// of its carrier (asynchronously, in a work queue), which also turns its
	// operational state up: wait for that on every link of the path, and for the other host's link to
	// the node to carry a ping, so that the ping below only depends on the
	// node's solicitation on the bridge.
	waitOperUp(t, l.Host.Path(), "br0", "veth0", "up0")
	waitOperUp(t, l.Pods[0].Path(), "eth0")
	waitOperUp(t, remote.Path(), "eth0")
	if _, err := remote.Ping(netip.MustParseAddr("fd00:98::1"), 5*time.Second); err != nil {
		t.Fatalf("ping the node from the other host: %v", err)
	}
	// A solicitation is resent after 1 s: an answer within 800 ms shows
	// that the first one went out.
	_, v6 := labtest.PodAddrs(0)
	if _, err := remote.Ping(v6.Addr(), 800*time.Millisecond); err != nil {
		t.Errorf("ping from another host to the first pod %s through the node: %v", v6.Addr(), err)
	}
}

// waitOperUp waits until the links of the namespace nsPath are
// operationally up.
func waitOperUp(t *testing.T, nsPath string, links ...string) {
	t.Helper()
	h := nstest.Netlink(t, nsPath)
	for _, name := range links {
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			l, err := h.LinkByName(name)
			must(t, err)
			if l.Attrs().OperState == netlink.OperUp {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s in %s: operational state %s after 5 s", name, nsPath, l.Attrs().OperState)
			}
		}
	}
}
