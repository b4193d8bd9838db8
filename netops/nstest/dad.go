package nstest

import (
	"fmt"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// WaitIPv6LinkLocal waits until each of the links in the namespace at
// nsPath has an IPv6 link-local address that is no longer tentative
// (the kernel makes it once the link's carrier comes on, and duplicate
// address detection takes 1 to 2 s more). A namespace that forwards IPv6
// needs it before the first packet: the neighbour solicitation for a
// forwarded packet's next hop takes the outgoing link's link-local
// address as its source, and while there is none the kernel sends no
// solicitation, so the first connection through a fresh link loses its
// packets to an INCOMPLETE neighbour (traffic from the namespace's own
// addresses, bound without DAD, is not held up).
func WaitIPv6LinkLocal(t testing.TB, nsPath string, links ...string) {
	t.Helper()
	nh := Netlink(t, nsPath)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting []string
		for _, name := range links {
			if err := linkLocalReady(nh, name); err != nil {
				waiting = append(waiting, err.Error())
			}
		}
		if len(waiting) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("IPv6 link-local addresses in %s not ready after 30 s: %v", nsPath, waiting)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// linkLocalReady says why the link name has no usable link-local address
// yet (nil: it has one).
func linkLocalReady(nh *netlink.Handle, name string) error {
	l, err := nh.LinkByName(name)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	addrs, err := nh.AddrList(l, netlink.FAMILY_V6)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	for _, a := range addrs {
		if a.IP.IsLinkLocalUnicast() && a.Flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) == 0 {
			return nil
		}
	}
	return fmt.Errorf("%s: no settled link-local address", name)
}
