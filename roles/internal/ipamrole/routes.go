package ipamrole

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
)

// Route is a route for the container, as the CNI result carries it.
type Route struct {
	Dst      netip.Prefix
	GW       netip.Addr // invalid: no gateway (the main plugin picks one)
	MTU      int
	AdvMSS   int
	Priority int
	Table    *int
	Scope    *int
}

// RouteJSON is a route as configs write it (the CNI result's shape).
type RouteJSON struct {
	Dst      string `json:"dst"`
	GW       string `json:"gw,omitempty"`
	MTU      int    `json:"mtu,omitempty"`
	AdvMSS   int    `json:"advmss,omitempty"`
	Priority int    `json:"priority,omitempty"`
	Table    *int   `json:"table,omitempty"`
	Scope    *int   `json:"scope,omitempty"`
}

// ParseRoutes checks the routes of config field field (e.g. "ipam.routes"):
// a destination in CIDR notation without host bits, a gateway of its family.
func ParseRoutes(field string, in []RouteJSON) ([]Route, error) {
	out := make([]Route, 0, len(in))
	for i, rj := range in {
		f := fmt.Sprintf("%s[%d]", field, i)
		if rj.Dst == "" {
			return nil, cniplug.ConfError(f+".dst", "missing: every route needs a destination, e.g. 0.0.0.0/0")
		}
		dst, err := netip.ParsePrefix(strings.TrimSpace(rj.Dst))
		if err != nil {
			return nil, cniplug.ConfError(f+".dst", "%q is not a destination in CIDR notation (want e.g. 0.0.0.0/0 or 10.96.0.0/12)", rj.Dst)
		}
		if dst.Addr().Is4In6() {
			return nil, cniplug.Errorf(types.ErrUnsupportedField, "config field %q: %s is an IPv4-mapped IPv6 prefix: write it as IPv4", f+".dst", dst)
		}
		if m := dst.Masked(); m != dst {
			return nil, cniplug.ConfError(f+".dst", "%s has host bits set: did you mean %s?", dst, m)
		}
		r := Route{Dst: dst, MTU: rj.MTU, AdvMSS: rj.AdvMSS, Priority: rj.Priority, Table: rj.Table, Scope: rj.Scope}
		if rj.GW != "" {
			gw, err := netip.ParseAddr(strings.TrimSpace(rj.GW))
			if err != nil {
				return nil, cniplug.ConfError(f+".gw", "%q is not an IP address (want e.g. 10.1.0.1)", rj.GW)
			}
			if gw.Is4() != dst.Addr().Is4() || gw.Is4In6() {
				return nil, cniplug.ConfError(f+".gw", "%s is not of the same IP family as dst %s: use a gateway of that family", gw, dst)
			}
			r.GW = gw
		}
		if rj.MTU < 0 || rj.AdvMSS < 0 || rj.Priority < 0 {
			return nil, cniplug.ConfError(f, "mtu, advmss and priority must not be negative (got %d, %d, %d)", rj.MTU, rj.AdvMSS, rj.Priority)
		}
		out = append(out, r)
	}
	return out, nil
}
