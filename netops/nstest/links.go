package nstest

import (
	"net"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// WaitLinksUp waits until the kernel's link watch has caught up with the
// carrier changes of a test's setup in the namespace at nsPath: every link
// that is administratively up is operationally up (or unknown, on a device
// that keeps no carrier state: lo, vxlan), and then SettleLinkWatch.
//
// The link watch handles a carrier change that is not urgent (a bridge
// losing or regaining its last port is not) up to a second later, and its
// NETDEV_CHANGE flushes the namespace's route cache, which makes every
// flowtable entry's route stale: that connection's next packet takes the
// slow path once. A test that counts the packets of an offloaded
// connection on the forward hook waits for it first. Operational states
// alone do not show such a change: a lab's first pod makes its bridge's
// carrier go on, off and on again (the port forwards while the veth's
// state is still unknown, stops when the link watch marks the veth down,
// forwards again once its peer is up), and the bridge's last event, still
// pending, changes nothing netlink shows until it is handled.
func WaitLinksUp(t testing.TB, nsPath string) {
	t.Helper()
	nh := Netlink(t, nsPath)
	deadline := time.Now().Add(30 * time.Second)
	for {
		links, err := nh.LinkList()
		if err != nil {
			t.Fatalf("links of %s: %v", nsPath, err)
		}
		var waiting []string
		for _, l := range links {
			if !linkSettled(l) {
				waiting = append(waiting, l.Attrs().Name+" "+l.Attrs().OperState.String())
			}
		}
		if len(waiting) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("links of %s not operationally up after 30 s: %v", nsPath, waiting)
		}
		time.Sleep(10 * time.Millisecond)
	}
	SettleLinkWatch(t)
}

// linkSettled reports whether the link watch is done with l, as far as
// netlink shows: l is administratively down, operationally up, or unknown
// on a device without carrier.
func linkSettled(l netlink.Link) bool {
	a := l.Attrs()
	if a.Flags&net.FlagUp == 0 {
		return true
	}
	switch a.OperState {
	case netlink.OperUp:
		return true
	case netlink.OperUnknown:
		switch l.Type() {
		case "bridge", "veth":
			return false // its carrier not yet handled
		}
		return true
	}
	return false
}

// SettleLinkWatch waits until the kernel's link watch has handled every
// carrier change made before the call, in any namespace. Its queue is one
// for the whole kernel and handles events in order, apart from urgent ones
// (a link coming up), which it may take first; so the function makes a
// non-urgent event of its own, twice, and waits each time until it has
// been handled: by then so has every event queued before the first, even
// one handled in the same pass as the first probe. Each probe is a bridge
// losing its only port in a namespace of its own (no route cache of the
// caller's is flushed), and waits up to the link watch's pace of one
// non-urgent pass a second.
func SettleLinkWatch(t testing.TB) {
	t.Helper()
	nh := Netlink(t, NewNS(t, "lw"))
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "lw0"}}
	port := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "lwa"}, PeerName: "lwb"}
	for _, l := range []netlink.Link{br, port} {
		if err := nh.LinkAdd(l); err != nil {
			t.Fatalf("link watch probe: add %s: %v", l.Attrs().Name, err)
		}
	}
	do := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("link watch probe: %v", err)
		}
	}
	do(nh.LinkSetMaster(port, br))
	do(nh.LinkSetUp(br))
	do(setUp(nh, "lwb"))
	for range 2 { // the two probes
		do(nh.LinkSetUp(port))
		waitOper(t, nh, "lw0", netlink.OperUp)
		do(nh.LinkSetDown(port))
		waitOper(t, nh, "lw0", netlink.OperDown)
	}
}

func setUp(nh *netlink.Handle, name string) error {
	l, err := nh.LinkByName(name)
	if err != nil {
		return err
	}
	return nh.LinkSetUp(l)
}

// waitOper waits until link name reads operational state want.
func waitOper(t testing.TB, nh *netlink.Handle, name string, want netlink.LinkOperState) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		l, err := nh.LinkByName(name)
		if err != nil {
			t.Fatalf("link watch probe: %v", err)
		}
		got := l.Attrs().OperState
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("link watch probe: %s is %v, not %v, after 30 s", name, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Netlink opens a netlink handle in the namespace at nsPath, closed when
// the test ends: for what a test reads or makes of the kernel that netops
// does not offer.
func Netlink(t testing.TB, nsPath string) *netlink.Handle {
	t.Helper()
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		t.Fatalf("open namespace %s: %v", nsPath, err)
	}
	defer ns.Close()
	nh, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatalf("netlink in %s: %v", nsPath, err)
	}
	t.Cleanup(nh.Close)
	return nh
}
