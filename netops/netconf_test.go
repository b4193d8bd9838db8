package netops_test

import (
	"context"
	"testing"
	"time"
)

// TestWatchForwarding: in a namespace of the test's, writes of
// net.ipv4.ip_forward and net.ipv6.conf.all.forwarding that change them
// are reported, in order, and nothing else is: not a write of the same
// value, nor a change of net.ipv4.conf.default.forwarding or
// net.ipv6.conf.default.forwarding (other interfaces' settings, on the
// same groups). The channel closes when ctx ends.
func TestWatchForwarding(t *testing.T) {
	h := openNS(t, "fw")
	must(t, h.SetSysctl("net.ipv4.ip_forward", "0"))
	must(t, h.SetSysctl("net.ipv6.conf.all.forwarding", "0"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events, err := h.WatchForwarding(ctx, func(err error) { t.Errorf("watch: %v", err) })
	must(t, err)
	next := func(what string) bool {
		t.Helper()
		select {
		case on, ok := <-events:
			if !ok {
				t.Fatalf("%s: the channel closed", what)
			}
			return on
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no event in 30 s", what)
		}
		return false
	}
	must(t, h.SetSysctl("net.ipv4.conf.default.forwarding", "1"))
	must(t, h.SetSysctl("net.ipv4.ip_forward", "1"))
	if !next("ip_forward 0 -> 1") {
		t.Fatal("ip_forward 0 -> 1: reported off")
	}
	must(t, h.SetSysctl("net.ipv4.ip_forward", "1")) // (no change)
	must(t, h.SetSysctl("net.ipv4.conf.all.forwarding", "0"))
	if next("conf.all.forwarding 1 -> 0") {
		t.Fatal("conf.all.forwarding 1 -> 0: reported on (or the write of the same value was reported)")
	}
	// IPv6's (issue 64: a single-stack IPv6 node's, which the bridge role
	// turns on with its first pod).
	must(t, h.SetSysctl("net.ipv6.conf.default.forwarding", "1"))
	must(t, h.SetSysctl("net.ipv6.conf.all.forwarding", "1"))
	if !next("net.ipv6.conf.all.forwarding 0 -> 1") {
		t.Fatal("net.ipv6.conf.all.forwarding 0 -> 1: reported off (or net.ipv6.conf.default.forwarding was reported)")
	}
	must(t, h.SetSysctl("net.ipv6.conf.all.forwarding", "1")) // (no change)
	must(t, h.SetSysctl("net.ipv6.conf.all.forwarding", "0"))
	if next("net.ipv6.conf.all.forwarding 1 -> 0") {
		t.Fatal("net.ipv6.conf.all.forwarding 1 -> 0: reported on (or the write of the same value was reported)")
	}
	cancel()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case on, ok := <-events:
			if !ok {
				return
			}
			t.Errorf("after the last change and ctx's end: an event (%v)", on)
		case <-deadline:
			t.Fatal("the channel is still open 30 s after ctx ended")
		}
	}
}
