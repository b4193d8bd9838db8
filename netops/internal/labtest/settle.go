package labtest

import (
	"net"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/cnibox/cnibox/netops"
)

// WaitLinksUp waits until every link of h's namespace that is
// administratively up is operationally up, or unknown (a device that keeps
// no carrier state: lo, vxlan): the kernel's link watch has caught up with
// the carrier changes of the test's setup. It acts up to a second after a
// change, and its NETDEV_CHANGE flushes the namespace's route cache, which
// makes every flowtable entry's route stale: that connection's next packet
// takes the slow path once. A test that counts the packets of an
// offloaded connection on the forward hook waits for it first.
func WaitLinksUp(t testing.TB, h *netops.Handle) {
	t.Helper()
	nh := Netlink(t, h.Path())
	deadline := time.Now().Add(30 * time.Second)
	for {
		links, err := nh.LinkList()
		Must(t, err)
		var waiting []string
		for _, l := range links {
			a := l.Attrs()
			if a.Flags&net.FlagUp != 0 && a.OperState != netlink.OperUp && a.OperState != netlink.OperUnknown {
				waiting = append(waiting, a.Name+" "+a.OperState.String())
			}
		}
		if len(waiting) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("links of %s not operationally up after 30 s: %v", h.Path(), waiting)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Netlink opens a netlink handle in the namespace at nsPath, closed when
// the test ends: for what a test reads of the kernel that netops does not
// offer.
func Netlink(t testing.TB, nsPath string) *netlink.Handle {
	t.Helper()
	ns, err := netns.GetFromPath(nsPath)
	Must(t, err)
	defer ns.Close()
	nh, err := netlink.NewHandleAt(ns)
	Must(t, err)
	t.Cleanup(nh.Close)
	return nh
}
