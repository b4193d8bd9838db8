package netops_test

import (
	"errors"
	"testing"

	"github.com/cnibox/cnibox/netops"
)

func TestPortIsolated(t *testing.T) {
	host := openNS(t, "iso")
	pod := openNS(t, "isop")
	_, err := host.EnsureBridge(netops.BridgeOpts{Name: "br0"})
	must(t, err)
	_, _, err = host.EnsureVeth(netops.VethOpts{HostName: "vethI", PeerName: "eth0", Peer: pod, Master: "br0"})
	must(t, err)
	if on, err := host.PortIsolated("vethI"); err != nil || on {
		t.Fatalf("new port: PortIsolated = %v, %v; want false", on, err)
	}
	for _, on := range []bool{true, true, false, false, true} {
		must(t, host.SetPortIsolated("vethI", on))
		got, err := host.PortIsolated("vethI")
		must(t, err)
		if got != on {
			t.Errorf("after SetPortIsolated(%v): PortIsolated = %v", on, got)
		}
	}
	if on, err := host.PortIsolated("br0"); err != nil || on {
		t.Errorf("PortIsolated(bridge itself) = %v, %v; want false, nil", on, err)
	}
	if err := host.SetPortIsolated("nope0", true); !errors.Is(err, netops.ErrNotFound) {
		t.Errorf("SetPortIsolated(missing) = %v, want ErrNotFound", err)
	}
	if _, err := host.PortIsolated("nope0"); !errors.Is(err, netops.ErrNotFound) {
		t.Errorf("PortIsolated(missing) = %v, want ErrNotFound", err)
	}
}
