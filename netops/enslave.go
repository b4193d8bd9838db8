package netops

import (
	"bytes"
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// UplinkOpts names the NIC that EnsureUplink puts on a bridge.
type UplinkOpts struct {
	Uplink string // the node's NIC, e.g. eth0
	Bridge string // an existing bridge, e.g. azure0
}

// UplinkResult says what EnsureUplink found and did.
type UplinkResult struct {
	// MAC is the NIC's hardware address, which the bridge now has too.
	MAC net.HardwareAddr
	// Moved are the addresses this call moved from the NIC to the bridge,
	// and MovedRoutes the routes through the NIC it re-created through the
	// bridge (none when an earlier call did the move).
	Moved       []netip.Prefix
	MovedRoutes []Route
}

// EnsureUplink makes the node's NIC a port of the bridge the way Azure's
// bridge mode does: the bridge takes the NIC's MAC, the NIC is enslaved, and
// the NIC's addresses (IPv6 link-local ones excepted) and the routes of the
// main table through it move to the bridge, so the node keeps its address and
// its default route. It is idempotent: once the NIC is a port without
// addresses of its own, it only checks. The kernel's own prefix routes of the
// moved addresses are not copied; they come back with the addresses.
//
// Connectivity through the NIC stops for the moment between enslaving it and
// re-creating the routes (a few netlink requests).
func (h *Handle) EnsureUplink(o UplinkOpts) (UplinkResult, error) {
	var res UplinkResult
	for _, n := range []string{o.Uplink, o.Bridge} {
		if err := checkIfName("ensure uplink", n); err != nil {
			return res, err
		}
	}
	fail := func(format string, args ...any) (UplinkResult, error) {
		return res, fmt.Errorf("put NIC %q on bridge %q in %s: %w", o.Uplink, o.Bridge, h.where(), fmt.Errorf(format, args...))
	}
	up, err := h.LinkByName(o.Uplink)
	if err != nil {
		return fail("%v", err)
	}
	br, err := h.LinkByName(o.Bridge)
	if err != nil {
		return fail("%v", err)
	}
	if br.Kind != "bridge" {
		return fail("%q is not a bridge (kind %q)", o.Bridge, br.Kind)
	}
	if up.Kind == "bridge" || up.Index == br.Index {
		return fail("the NIC is itself a bridge")
	}
	if len(up.MAC) != 6 {
		return fail("the NIC has no Ethernet MAC")
	}
	res.MAC = up.MAC
	if up.MasterIndex != 0 && up.MasterIndex != br.Index {
		return fail("the NIC is already a port of another device (ifindex %d): %w", up.MasterIndex, ErrExists)
	}
	if !bytes.Equal(br.MAC, up.MAC) {
		if err := h.SetMAC(o.Bridge, up.MAC); err != nil {
			return fail("%v", err)
		}
	}
	addrs, err := h.Addrs(o.Uplink)
	if err != nil {
		return fail("%v", err)
	}
	var routes []Route
	if len(addrs) > 0 {
		all, err := h.Routes(o.Uplink)
		if err != nil {
			return fail("%v", err)
		}
		routes = movableRoutes(all, addrs)
	}
	if up.MasterIndex != br.Index {
		err := h.setLink("set master "+o.Bridge, o.Uplink, 0, 0, nl.NewRtAttr(unix.IFLA_MASTER, u32(br.Index)))
		if err != nil {
			return fail("%v", err)
		}
	}
	for _, p := range addrs {
		if err := h.DeleteAddr(o.Uplink, p); err != nil {
			return fail("%v", err)
		}
		if err := h.EnsureAddr(o.Bridge, p, AddrOpts{NoDAD: true}); err != nil {
			return fail("%v", err)
		}
		res.Moved = append(res.Moved, p)
	}
	for _, r := range routes {
		r.Dev = o.Bridge
		if err := h.EnsureRoute(r); err != nil {
			return fail("re-create route %s: %v", r, err)
		}
		res.MovedRoutes = append(res.MovedRoutes, r)
	}
	if !up.Up {
		if err := h.SetLinkUp(o.Uplink); err != nil {
			return fail("%v", err)
		}
	}
	if !br.Up {
		if err := h.SetLinkUp(o.Bridge); err != nil {
			return fail("%v", err)
		}
	}
	return res, nil
}

// movableRoutes are the routes to re-create on the bridge: all but the
// kernel's prefix routes of the moved addresses and IPv6 link-local ones,
// directly connected ones first (the gateways of the others need them).
func movableRoutes(all []Route, addrs []netip.Prefix) []Route {
	var out []Route
	for _, r := range all {
		if r.Dst.Addr().Is6() && r.Dst.Addr().IsLinkLocalUnicast() {
			continue
		}
		if !r.GW.IsValid() && slices.ContainsFunc(addrs, func(p netip.Prefix) bool { return p.Masked() == r.Dst }) {
			continue
		}
		out = append(out, r)
	}
	slices.SortStableFunc(out, func(a, b Route) int { return cmp.Compare(boolInt(a.GW.IsValid()), boolInt(b.GW.IsValid())) })
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
