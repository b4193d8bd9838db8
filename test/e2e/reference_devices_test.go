package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/cnibox/cnibox/netops"
)

// TestReferenceHostDevice compares host-device + host-local between
// Debian's reference (1.1.1) and cnibox, each moving a device of its own (a
// veth to a LAN namespace stands in for the node's NIC, with an address of
// the node's, MTU 1400, up): the same result, pod interface, addresses and
// routes. DEL differs on purpose (docs/roles/host-device.md): cnibox gives
// the device back with its address, MTU and up state and a second DEL
// succeeds; the reference leaves it down without its address, and its
// second DEL fails looking for the device in the pod.
func TestReferenceHostDevice(t *testing.T) {
	requireReference(t, "host-device")
	for _, v := range refVersions {
		for name, ranges := range lanRanges {
			t.Run(v+"/"+name, func(t *testing.T) {
				e := newEnv(t)
				conf := func(dir, dev string) *libcni.NetworkConfigList {
					return listFromJSON(t, fmt.Sprintf(`{"cniVersion":%q,"name":"hostdev","plugins":[{"type":"host-device","device":%q,"ipam":%s}]}`,
						v, dev, ipamJSON(dir, ranges, lanRoutes)))
				}
				ref := libcni.NewCNIConfigWithCacheDir([]string{refDir}, t.TempDir(), newExec())
				refBefore := newHostDevice(t, "hd7")
				refView, refAfter, refDel2 := sideDevice(t, ref, conf(t.TempDir(), "hd7"), e.newPod("ref"), "hd7")
				boxBefore := newHostDevice(t, "hd8")
				boxView, boxAfter, boxDel2 := sideDevice(t, e.cni, conf("", "hd8"), e.newPod("box"), "hd8")
				rv, _ := json.MarshalIndent(refView, "", "  ")
				bv, _ := json.MarshalIndent(boxView, "", "  ")
				if string(rv) != string(bv) {
					t.Errorf("the reference and cnibox differ:\nreference:\n%s\ncnibox:\n%s", rv, bv)
				}
				if boxDel2 != nil {
					t.Errorf("cnibox's second DEL: %v", boxDel2)
				}
				if boxAfter.Up != boxBefore.Up || boxAfter.MTU != boxBefore.MTU || !slices.Equal(boxAfter.Addrs, boxBefore.Addrs) {
					t.Errorf("cnibox gave the device back as %+v, it was %+v", boxAfter, boxBefore)
				}
				if got := e.reservations("hostdev"); len(got) != 0 {
					t.Errorf("cnibox reservations left after DEL: %v", got)
				}
				// What the documented differences rest on; a reference that
				// changes them makes this say so.
				if refAfter.Up || len(refAfter.Addrs) != 0 || refDel2 == nil {
					t.Logf("the reference's DEL changed: device back as %+v (was %+v), second DEL: %v", refAfter, refBefore, refDel2)
				}
			})
		}
	}
}

// newHostDevice gives the node a device called name (a veth to a LAN
// namespace) with an address of its own, MTU 1400, up, and returns its
// state.
func newHostDevice(t *testing.T, name string) netops.DeviceState {
	t.Helper()
	newRefLAN(t, name)
	host := hostHandle(t)
	if err := host.SetMTU(name, 1400); err != nil {
		t.Fatal(err)
	}
	if err := host.EnsureAddr(name, netip.MustParsePrefix("10.58.0.2/24"), addrOpts()); err != nil {
		t.Fatal(err)
	}
	if err := host.SetLinkUp(name); err != nil {
		t.Fatal(err)
	}
	st, err := host.DeviceStateOf(name)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// sideDevice is side for a role that moves the node's device dev into the
// pod: ADD, the view, CHECK (from 0.4.0), DEL; then the device's state on
// the node and what a second DEL answered.
func sideDevice(t *testing.T, cni *libcni.CNIConfig, l *libcni.NetworkConfigList, p *pod, dev string) (sideView, netops.DeviceState, error) {
	t.Helper()
	v := addSide(t, cni, l, p)
	delSide(t, cni, l, p, 1)
	st, err := hostHandle(t).DeviceStateOf(dev)
	if err != nil {
		t.Fatalf("the device is not back on the node after DEL: %v", err)
	}
	return v, st, cni.DelNetworkList(context.Background(), l, p.rt)
}

// TestReferenceTap compares tap + host-local (with an MTU, multi-queue and
// an owner) between upstream's reference (Debian's 1.1.1 has no tap) and
// cnibox.
func TestReferenceTap(t *testing.T) {
	requireKernel(t, "TUN/TAP (tun)", func(h *netops.Handle) error {
		_, err := h.EnsureTap(netops.TapOpts{Name: "probe0"})
		return err
	})
	compareUpstream(t, "tap", map[string]string{
		"v4":   `[[{"subnet":"10.55.0.0/24","gateway":"10.55.0.1"}]]`,
		"dual": `[[{"subnet":"10.55.0.0/24","gateway":"10.55.0.1"}],[{"subnet":"fd55::/64","gateway":"fd55::1"}]]`,
	}, func(v, ipam string) string {
		return fmt.Sprintf(`{"cniVersion":%q,"name":"vmnet","plugins":[{"type":"tap","mtu":1400,"multiQueue":true,"owner":1000,"ipam":%s}]}`, v, ipam)
	}, `[{"dst":"192.168.55.0/24"},{"dst":"fd00:55::/64"}]`)
}
