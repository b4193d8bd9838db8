package netops_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/cnibox/cnibox/netops"
)

// addrEvents subscribes to the address changes of h's namespace until the
// test ends.
func addrEvents(t *testing.T, h *netops.Handle) <-chan netlink.AddrUpdate {
	t.Helper()
	ns, err := netns.GetFromPath(h.Path())
	must(t, err)
	t.Cleanup(func() { ns.Close() })
	ch, done := make(chan netlink.AddrUpdate, 64), make(chan struct{})
	must(t, netlink.AddrSubscribeWithOptions(ch, done, netlink.AddrSubscribeOptions{Namespace: &ns}))
	t.Cleanup(func() { close(done) })
	return ch
}

// waitAddrGone waits (up to 10 s, generous on a loaded machine) for the
// kernel's event that p went, and returns how long that took from since.
func waitAddrGone(t *testing.T, ev <-chan netlink.AddrUpdate, p netip.Prefix, since time.Time) time.Duration {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case u := <-ev:
			if !u.NewAddr && u.LinkAddress.String() == p.String() {
				return time.Since(since)
			}
		case <-deadline:
			t.Fatalf("%s still there 10 s after its last refresh", p)
		}
	}
}

// TestAddrLifetime: an address with a lifetime of 1 s goes by itself when
// not refreshed (the agent's fence), stays while refreshed every 250 ms,
// and a permanent address that is ensured with a lifetime gets one.
// Lifetimes are rounded up to whole seconds. IPv4 and IPv6 alike.
func TestAddrLifetime(t *testing.T) {
	_, h := podWithEth0(t)
	ev := addrEvents(t, h)
	for _, p := range []netip.Prefix{netip.MustParsePrefix("192.0.2.10/32"), netip.MustParsePrefix("2001:db8::10/128")} {
		t.Run(p.Addr().String(), func(t *testing.T) { testAddrLifetime(t, h, ev, p) })
	}
}

func testAddrLifetime(t *testing.T, h *netops.Handle, ev <-chan netlink.AddrUpdate, p netip.Prefix) {
	lifetime := func(t *testing.T) (time.Duration, bool) {
		t.Helper()
		valid, found, err := h.AddrLifetime("eth0", p)
		must(t, err)
		return valid, found
	}
	gone := func(t *testing.T, what string, since time.Time) {
		t.Helper()
		took := waitAddrGone(t, ev, p, since)
		if _, found := lifetime(t); found {
			t.Fatalf("%s: the address is still listed after its delete event", what)
		}
		t.Logf("%s: gone %v after the last refresh", what, took.Round(time.Millisecond))
	}

	t.Run("expires", func(t *testing.T) {
		must(t, h.EnsureAddrLifetime("eth0", p, time.Second))
		start := time.Now()
		if valid, found := lifetime(t); !found || valid != time.Second {
			t.Fatalf("AddrLifetime = %v, %t; want 1s, true", valid, found)
		}
		gone(t, "not refreshed", start)
	})

	t.Run("refreshed", func(t *testing.T) {
		must(t, h.EnsureAddrLifetime("eth0", p, time.Second))
		last := time.Now()
		for end := last.Add(3 * time.Second); time.Now().Before(end); {
			time.Sleep(250 * time.Millisecond)
			must(t, h.EnsureAddrLifetime("eth0", p, time.Second))
			last = time.Now()
			if _, found := lifetime(t); !found {
				t.Fatalf("the address went while refreshed every 250 ms")
			}
		}
		for len(ev) > 0 {
			if u := <-ev; !u.NewAddr {
				t.Fatalf("address %s deleted while refreshed every 250 ms", u.LinkAddress.String())
			}
		}
		gone(t, "refreshed for 3 s, then not", last)
	})

	t.Run("permanent gets a lifetime", func(t *testing.T) {
		must(t, h.EnsureAddr("eth0", p, netops.AddrOpts{}))
		if valid, found := lifetime(t); !found || valid != 0 {
			t.Fatalf("AddrLifetime of a permanent address = %v, %t; want 0, true", valid, found)
		}
		must(t, h.EnsureAddrLifetime("eth0", p, 1500*time.Millisecond)) // rounded up: 2 s
		start := time.Now()
		if valid, found := lifetime(t); !found || valid != 2*time.Second {
			t.Fatalf("AddrLifetime after EnsureAddrLifetime(1.5s) = %v, %t; want 2s, true", valid, found)
		}
		gone(t, "given a lifetime", start)
	})

	t.Run("at least a second", func(t *testing.T) {
		must(t, h.EnsureAddrLifetime("eth0", p, 0))
		if valid, found := lifetime(t); !found || valid != time.Second {
			t.Fatalf("AddrLifetime after EnsureAddrLifetime(0) = %v, %t; want 1s, true", valid, found)
		}
		gone(t, "zero asked", time.Now())
	})
}
