package cli

import (
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
)

// TestOverlayDevice: `cnibox overlay status` reports the vxlan backend's
// device with its VXLAN fields, another backend's by kind, and a missing
// one as not there (no error).
func TestOverlayDevice(t *testing.T) {
	h := openNS(t, nstest.NewNS(t, "ovldev"))
	if _, _, err := h.EnsureVXLAN(netops.VXLANOpts{Name: "flannel.1", VNI: 1, Port: 8472}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.EnsureVeth(netops.VethOpts{HostName: "flannel-wg", PeerName: "peer", Peer: h}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		vxlan bool
		check func(ovlDevice) bool
	}{
		{"flannel.1", true, func(d ovlDevice) bool { return d.Exists && d.VNI == 1 && d.Port == 8472 && d.MAC != "" && d.Kind == "" }},
		{"flannel-wg", false, func(d ovlDevice) bool { return d.Exists && d.Kind == "veth" && d.VNI == 0 }},
		{"flannel-wg", true, func(d ovlDevice) bool { return !d.Exists && d.Error != "" }}, // not a VXLAN device
		{"gone.1", true, func(d ovlDevice) bool { return !d.Exists && d.Error == "" }},
		{"gone-wg", false, func(d ovlDevice) bool { return !d.Exists && d.Error == "" }},
	} {
		if d := overlayDevice(h, tc.name, tc.vxlan); !tc.check(d) {
			t.Errorf("overlayDevice(%s, vxlan %v) = %+v", tc.name, tc.vxlan, d)
		}
	}
}
