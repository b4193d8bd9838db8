package netops_test

import (
	"errors"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
)

// TestEnsureDummy: a dummy is created down with the kernel's MTU; a second
// call keeps it; a device of another kind by that name is ErrExists;
// DeleteLink removes it and a second DeleteLink is no error.
func TestEnsureDummy(t *testing.T) {
	h := openNS(t, "dummy")
	l, err := h.EnsureDummy("eth0")
	nstest.SkipIfKernelLacks(t, "dummy devices (dummy)", err)
	if err != nil {
		t.Fatal(err)
	}
	if l.Kind != "dummy" || l.Up || l.MTU != 1500 || len(l.MAC) != 6 {
		t.Errorf("created %+v; want a down dummy with mtu 1500 and a MAC", l)
	}
	if again, err := h.EnsureDummy("eth0"); err != nil || again.Index != l.Index {
		t.Errorf("second EnsureDummy = %+v, %v; want the same device", again, err)
	}
	nic(t, h)
	if _, err := h.EnsureDummy("nic0"); !errors.Is(err, netops.ErrExists) {
		t.Errorf("EnsureDummy over a veth = %v, want ErrExists", err)
	}
	if _, err := h.EnsureDummy("0123456789abcdefg"); err == nil {
		t.Error("EnsureDummy with a 17-byte name succeeded")
	}
	must(t, h.DeleteLink("eth0"))
	must(t, h.DeleteLink("eth0"))
	if _, err := h.LinkByName("eth0"); !errors.Is(err, netops.ErrNotFound) {
		t.Errorf("eth0 after DeleteLink: %v, want ErrNotFound", err)
	}
}
