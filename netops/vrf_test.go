package netops_test

import (
	"errors"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
)

// TestVRF: EnsureVRF picks the lowest free table and keeps an existing VRF;
// another table or a device of another kind is ErrExists; ReleaseFromVRF
// deletes the VRF with its last member.
func TestVRF(t *testing.T) {
	h := openNS(t, "vrf")
	table, err := h.EnsureVRF("blue", 0)
	nstest.SkipIfKernelLacks(t, "VRF devices (vrf)", err)
	must(t, err)
	if table != 1 {
		t.Errorf("first VRF's table %d, want 1", table)
	}
	if again, err := h.EnsureVRF("blue", 0); err != nil || again != 1 {
		t.Errorf("second EnsureVRF = %d, %v; want table 1", again, err)
	}
	if _, err := h.EnsureVRF("blue", 9); !errors.Is(err, netops.ErrExists) {
		t.Errorf("EnsureVRF with another table = %v, want ErrExists", err)
	}
	if red, err := h.EnsureVRF("red", 0); err != nil || red != 2 {
		t.Errorf("second VRF's table %d, %v; want 2", red, err)
	}
	nic(t, h)
	if _, err := h.EnsureVRF("nic0", 0); !errors.Is(err, netops.ErrExists) {
		t.Errorf("EnsureVRF over a veth = %v, want ErrExists", err)
	}
	must(t, h.EnslaveToVRF("blue", "nic0"))
	must(t, h.EnslaveToVRF("blue", "nic0"))
	if err := h.EnslaveToVRF("red", "nic0"); !errors.Is(err, netops.ErrExists) {
		t.Errorf("EnslaveToVRF into a second VRF = %v, want ErrExists", err)
	}
	if gone, err := h.ReleaseFromVRF("blue", "nic0"); err != nil || !gone {
		t.Errorf("ReleaseFromVRF of the last member = %v, %v; want the VRF deleted", gone, err)
	}
	if _, err := h.VRF("blue"); !errors.Is(err, netops.ErrNotFound) {
		t.Errorf("VRF after its deletion: %v, want ErrNotFound", err)
	}
	if gone, err := h.ReleaseFromVRF("blue", "nic0"); err != nil || !gone {
		t.Errorf("second ReleaseFromVRF = %v, %v", gone, err)
	}
}
