package netops

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// EnsureHostRoute routes the single address dst (a /32 or /128) out of dev
// with scope host, the node's route to a point-to-point pod (`ip route
// replace DST dev DEV scope host`).
func (h *Handle) EnsureHostRoute(dev string, dst netip.Addr) error {
	if !dst.IsValid() {
		return fmt.Errorf("ensure host route on %q: invalid address", dev)
	}
	dst = dst.Unmap()
	ipnet, err := toIPNet(netip.PrefixFrom(dst, dst.BitLen()))
	if err != nil {
		return err
	}
	err = h.withLinkIndex(dev, func(idx int) error {
		return h.nlh.RouteReplace(&netlink.Route{LinkIndex: idx, Dst: ipnet, Scope: netlink.SCOPE_HOST})
	})
	if err != nil {
		return fmt.Errorf("replace route %s dev %s scope host in %s: %w", dst, dev, h.where(), classify(err))
	}
	return nil
}
