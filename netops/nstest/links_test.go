package nstest_test

import (
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/cnibox/cnibox/netops/nstest"
)

// TestSettleLinkWatch: right after a pass of the link watch (the last
// probe of WaitLinksUp's SettleLinkWatch), a bridge loses its only port:
// its carrier event waits for the next non-urgent pass, up to a second,
// and the bridge still reads up. Once SettleLinkWatch returns, the event
// has been handled: the bridge reads down.
func TestSettleLinkWatch(t *testing.T) {
	path := nstest.NewNS(t, "lwt")
	nh := nstest.Netlink(t, path)
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "b0"}}
	port := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "p0"}, PeerName: "q0"}
	must(t, nh.LinkAdd(br))
	must(t, nh.LinkAdd(port))
	must(t, nh.LinkSetMaster(port, br))
	q0, err := nh.LinkByName("q0")
	must(t, err)
	for _, l := range []netlink.Link{br, q0, port} {
		must(t, nh.LinkSetUp(l))
	}
	nstest.WaitLinksUp(t, path)

	must(t, nh.LinkSetDown(port))
	if oper(t, nh) == netlink.OperUp {
		t.Log("the bridge's carrier event is pending: it reads up")
	} else {
		t.Log("the link watch handled the bridge's event at once (a second passed since its last pass): the test shows nothing this run")
	}
	nstest.SettleLinkWatch(t)
	if got := oper(t, nh); got != netlink.OperDown {
		t.Errorf("after SettleLinkWatch the bridge without a port reads %v, want down: its carrier event not handled", got)
	}
}

func oper(t *testing.T, nh *netlink.Handle) netlink.LinkOperState {
	t.Helper()
	l, err := nh.LinkByName("b0")
	must(t, err)
	return l.Attrs().OperState
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
