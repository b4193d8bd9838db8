package agent

import (
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"testing"

	"github.com/cnibox/cnibox/agent/backend"
	"github.com/cnibox/cnibox/agent/lease"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// devicesOnly is a backend whose devices are names.
type devicesOnly struct {
	backend.Backend
	devs []string
}

func (d devicesOnly) Devices() []string { return d.devs }

// TestFastPathDevices: the agent's fast path hooks the backend's devices
// that exist, the underlay interface and the bridges holding an address
// of this node's subnet (the pods' gateway), not another bridge (docker0)
// nor a pod's veth; with --fast-path=false it removes the table. On a
// kernel without flowtables the agent notes it once and writes nothing.
func TestFastPathDevices(t *testing.T) {
	h := ifaceNode(t) // eth0, eth1, ens5
	for _, br := range []struct{ name, addr string }{{"cni0", "10.5.1.1/24"}, {"docker0", "172.17.0.1/16"}, {"cni6", "fd00:5:1::1/64"}} {
		if _, err := h.EnsureBridge(netops.BridgeOpts{Name: br.name}); err != nil {
			t.Fatal(err)
		}
		if err := h.EnsureAddr(br.name, netip.MustParsePrefix(br.addr), netops.AddrOpts{NoDAD: true}); err != nil {
			t.Fatal(err)
		}
	}
	a := &agent{
		o:   Options{FastPath: true},
		log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		h:   h,
		be:  devicesOnly{devs: []string{"ens5", "flannel.1"}}, // flannel.1 is not there
		own: lease.Lease{Subnet: netip.MustParsePrefix("10.5.1.0/24"), Subnet6: netip.MustParsePrefix("fd00:5:1::/64")},
	}
	a.under.Iface = "eth0"
	devs, err := a.fastPathDevices()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"cni0", "cni6", "ens5", "eth0"}; !slices.Equal(devs, want) {
		t.Errorf("fastPathDevices() = %v, want %v", devs, want)
	}
	if err := a.ensureFastPath(); err != nil {
		t.Fatal(err)
	}
	got, _, err := h.NFT().FastPath()
	if err != nil {
		t.Fatal(err)
	}
	if a.noFlowtables {
		_, err := h.NFT().EnsureFastPath(nft.FastPathSpec{Devices: devs})
		if !errors.Is(err, nft.ErrNoFlowtable) {
			t.Fatalf("the agent found no flowtables, but EnsureFastPath says %v", err)
		}
		nstest.SkipIfKernelLacks(t, "nftables flowtables", err)
	}
	if !slices.Equal(got, devs) {
		t.Errorf("the flowtable's devices = %v, want %v", got, devs)
	}
	a.o.FastPath = false
	if err := a.ensureFastPath(); err != nil {
		t.Fatal(err)
	}
	if got, _, err := h.NFT().FastPath(); err != nil || got != nil {
		t.Errorf("with --fast-path=false the flowtable has %v (%v), want no table", got, err)
	}
}
