package netops_test

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nstest"
)

// TestPing: a pod pings the bridge's addresses (IPv4 and IPv6) from inside
// its namespace; an address nobody holds gets no answer; one the pod has no
// route to fails at once.
func TestPing(t *testing.T) {
	l := labtest.New(t, 1)
	pod := l.Pods[0]
	for _, gw := range []string{"10.99.0.1", "fd00:99::1"} {
		if _, err := pod.Ping(netip.MustParseAddr(gw), 3*time.Second); err != nil {
			t.Errorf("Ping(%s): %v", gw, err)
		}
	}
	if _, err := pod.Ping(netip.MustParseAddr("10.99.0.200"), 500*time.Millisecond); !errors.Is(err, netops.ErrNoAnswer) {
		t.Errorf("Ping(10.99.0.200, nobody there) = %v, want ErrNoAnswer", err)
	}
	must(t, pod.DeleteRoute(netops.Route{GW: netip.MustParseAddr("10.99.0.1"), Dev: "eth0"}))
	if _, err := pod.Ping(netip.MustParseAddr("192.0.2.1"), time.Second); err == nil || errors.Is(err, netops.ErrNoAnswer) {
		t.Errorf("Ping(192.0.2.1) without a default route = %v, want the kernel's unreachable error", err)
	}
}

// TestNetnsExists: a mounted namespace exists; a removed one, a plain file
// and a missing path do not.
func TestNetnsExists(t *testing.T) {
	nstest.RequireRoot(t)
	path := nstest.NewNS(t, "nsx")
	if ok, err := netops.NetnsExists(path); !ok || err != nil {
		t.Errorf("NetnsExists(%s) = %v, %v; want true", path, ok, err)
	}
	if ok, err := netops.NetnsExists("/proc/self/ns/net"); !ok || err != nil {
		t.Errorf("NetnsExists(/proc/self/ns/net) = %v, %v; want true", ok, err)
	}
	if ok, err := netops.NetnsExists("/proc/self/ns/mnt"); ok || err != nil {
		t.Errorf("NetnsExists(/proc/self/ns/mnt) = %v, %v; want false (not a network namespace)", ok, err)
	}
	plain := filepath.Join(t.TempDir(), "leftover")
	must(t, os.WriteFile(plain, nil, 0o600))
	for _, p := range []string{plain, "/run/netns/cnibox-no-such-ns", "/proc/999999999/ns/net"} {
		if ok, err := netops.NetnsExists(p); ok || err != nil {
			t.Errorf("NetnsExists(%s) = %v, %v; want false, nil", p, ok, err)
		}
	}
}
