package nstest_test

import (
	"net/netip"
	"testing"

	"github.com/cnibox/cnibox/netops/nstest"
)

func TestReachable(t *testing.T) {
	a, b := nstest.NewNS(t, "nsra"), nstest.NewNS(t, "nsrb")
	lo := netip.MustParseAddr("127.0.0.1")
	if err := nstest.Reachable(t, b, b, lo); err != nil {
		t.Errorf("b's loopback from b: %v", err)
	}
	// 127.0.0.1 in a is a's own loopback, where nothing listens.
	if err := nstest.Reachable(t, a, b, lo); err == nil {
		t.Error("b's loopback reachable from a")
	}
}
