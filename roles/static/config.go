package static

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/ipamrole"
)

// config is the static part of a plugin config, validated.
type config struct {
	Addresses []ipamrole.Address
	Routes    []ipamrole.Route
	DNS       types.DNS
}

// ipamJSON is the "ipam" section as written.
type ipamJSON struct {
	Type      string `json:"type"`
	Addresses []struct {
		Address string `json:"address"`
		Gateway string `json:"gateway,omitempty"`
	} `json:"addresses"`
	Routes []ipamrole.RouteJSON `json:"routes"`
	DNS    types.DNS            `json:"dns"`
}

// loadConfig reads the "ipam" section as the reference static plugin
// does: ipam.addresses, plus CNI_ARGS IP= (comma-separated CIDRs, appended)
// and GATEWAY= (set on the addresses whose subnet contains it); args.cni.ips,
// then runtimeConfig.ips (the ips capability), replace the list when given.
func loadConfig(a *cniplug.Args) (*config, error) {
	in, err := ipamrole.Section[ipamJSON](a, "static reads its addresses")
	if err != nil {
		return nil, err
	}
	cfg := &config{DNS: in.DNS}
	if cfg.Routes, err = ipamrole.ParseRoutes("ipam.routes", in.Routes); err != nil {
		return nil, err
	}
	for i, ad := range in.Addresses {
		f := fmt.Sprintf("ipam.addresses[%d]", i)
		p, err := parseAddr(f+".address", ad.Address)
		if err != nil {
			return nil, err
		}
		sa := ipamrole.Address{Addr: p}
		if ad.Gateway != "" {
			if sa.Gateway, err = parseGateway(f+".gateway", ad.Gateway, p); err != nil {
				return nil, err
			}
		}
		cfg.Addresses = append(cfg.Addresses, sa)
	}
	if ips := string(a.CNIArgs.IP); ips != "" {
		for _, s := range strings.Split(ips, ",") {
			p, err := parseAddr("CNI_ARGS IP", s)
			if err != nil {
				return nil, err
			}
			cfg.Addresses = append(cfg.Addresses, ipamrole.Address{Addr: p})
		}
	}
	if gws := string(a.CNIArgs.GATEWAY); gws != "" {
		for _, s := range strings.Split(gws, ",") {
			gw, err := netip.ParseAddr(strings.TrimSpace(s))
			if err != nil || gw.Zone() != "" {
				return nil, cniplug.ConfError("CNI_ARGS GATEWAY", "%q is not an IP address (want e.g. GATEWAY=10.10.0.254, comma separated)", s)
			}
			for i := range cfg.Addresses {
				if cfg.Addresses[i].Addr.Contains(gw.Unmap()) {
					cfg.Addresses[i].Gateway = gw.Unmap()
				}
			}
		}
	}
	for _, src := range []struct {
		field string
		ips   []string
	}{
		{"args.cni.ips", a.Conf.Args.CNI.IPs},
		{"runtimeConfig.ips", a.Conf.RuntimeConfig.IPs},
	} {
		if len(src.ips) == 0 {
			continue
		}
		cfg.Addresses = cfg.Addresses[:0:0]
		for i, s := range src.ips {
			p, err := parseAddr(fmt.Sprintf("%s[%d]", src.field, i), s)
			if err != nil {
				return nil, err
			}
			cfg.Addresses = append(cfg.Addresses, ipamrole.Address{Addr: p})
		}
	}
	if len(cfg.Addresses) == 0 {
		return nil, cniplug.ConfError("ipam.addresses", "no address given: list them in ipam.addresses (e.g. [{\"address\": \"10.10.0.1/24\"}]) or pass them with the ips capability or CNI_ARGS IP=")
	}
	return cfg, nil
}

func parseAddr(field, s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	p, err := netip.ParsePrefix(s)
	if err != nil {
		if _, aerr := netip.ParseAddr(s); aerr == nil {
			return p, cniplug.ConfError(field, "%q has no prefix length: static needs the subnet too, e.g. %s/24", s, s)
		}
		return p, cniplug.ConfError(field, "%q is not an address in CIDR notation (want e.g. 10.10.0.1/24 or fd00::1/64)", s)
	}
	if p.Addr().Is4In6() {
		return p, cniplug.Errorf(types.ErrUnsupportedField, "config field %q: %s is an IPv4-mapped IPv6 address: write it as IPv4", field, p)
	}
	return p, nil
}

func parseGateway(field, s string, p netip.Prefix) (netip.Addr, error) {
	gw, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil {
		return gw, cniplug.ConfError(field, "%q is not an IP address (want e.g. 10.10.0.254)", s)
	}
	if gw.Zone() != "" || gw.Is4In6() {
		return gw, cniplug.Errorf(types.ErrUnsupportedField, "config field %q: %s: zoned and IPv4-mapped gateways are not supported", field, gw)
	}
	if gw.Is4() != p.Addr().Is4() {
		return gw, cniplug.ConfError(field, "%s is not of the same IP family as the address %s", gw, p)
	}
	return gw, nil
}
