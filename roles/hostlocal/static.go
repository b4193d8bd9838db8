package hostlocal

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
)

// staticConfig is the static part of a plugin config, validated.
type staticConfig struct {
	Addresses []staticAddress
	Routes    []route
	DNS       types.DNS
}

// staticAddress is one address with its prefix length (host bits kept) and
// optional gateway.
type staticAddress struct {
	Addr    netip.Prefix
	Gateway netip.Addr
}

type staticJSON struct {
	Type      string `json:"type"`
	Addresses []struct {
		Address string `json:"address"`
		Gateway string `json:"gateway,omitempty"`
	} `json:"addresses"`
	Routes []routeJSON `json:"routes"`
	DNS    types.DNS   `json:"dns"`
}

// loadStaticConfig reads the "ipam" section as the reference static plugin
// does: ipam.addresses, plus CNI_ARGS IP= (comma-separated CIDRs, appended)
// and GATEWAY= (set on the addresses whose subnet contains it); args.cni.ips,
// then runtimeConfig.ips (the ips capability), replace the list when given.
func loadStaticConfig(a *cniplug.Args) (*staticConfig, error) {
	var raw struct {
		IPAM *staticJSON `json:"ipam"`
	}
	if err := decode("stdin", a.StdinData, &raw); err != nil {
		return nil, err
	}
	if raw.IPAM == nil {
		return nil, cniplug.ConfError("ipam", "missing: static reads its addresses from the plugin config's \"ipam\" section")
	}
	cfg := &staticConfig{DNS: raw.IPAM.DNS}
	var err error
	if cfg.Routes, err = parseRoutes("ipam.routes", raw.IPAM.Routes); err != nil {
		return nil, err
	}
	for i, ad := range raw.IPAM.Addresses {
		f := fmt.Sprintf("ipam.addresses[%d]", i)
		p, err := parseStaticAddr(f+".address", ad.Address)
		if err != nil {
			return nil, err
		}
		sa := staticAddress{Addr: p}
		if ad.Gateway != "" {
			if sa.Gateway, err = parseGateway(f+".gateway", ad.Gateway, p); err != nil {
				return nil, err
			}
		}
		cfg.Addresses = append(cfg.Addresses, sa)
	}
	if ips := string(a.CNIArgs.IP); ips != "" {
		for _, s := range strings.Split(ips, ",") {
			p, err := parseStaticAddr("CNI_ARGS IP", s)
			if err != nil {
				return nil, err
			}
			cfg.Addresses = append(cfg.Addresses, staticAddress{Addr: p})
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
			p, err := parseStaticAddr(fmt.Sprintf("%s[%d]", src.field, i), s)
			if err != nil {
				return nil, err
			}
			cfg.Addresses = append(cfg.Addresses, staticAddress{Addr: p})
		}
	}
	if len(cfg.Addresses) == 0 {
		return nil, cniplug.ConfError("ipam.addresses", "no address given: list them in ipam.addresses (e.g. [{\"address\": \"10.10.0.1/24\"}]) or pass them with the ips capability or CNI_ARGS IP=")
	}
	return cfg, nil
}

func parseStaticAddr(field, s string) (netip.Prefix, error) {
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

func staticAdd(_ context.Context, a *cniplug.Args) (types.Result, error) {
	cfg, err := loadStaticConfig(a)
	if err != nil {
		return nil, err
	}
	res := &current.Result{CNIVersion: current.ImplementedSpecVersion, DNS: cfg.DNS}
	for _, ad := range cfg.Addresses {
		ipc := &current.IPConfig{Address: ipNet(ad.Addr)}
		if ad.Gateway.IsValid() {
			ipc.Gateway = net.IP(ad.Gateway.AsSlice())
		}
		res.IPs = append(res.IPs, ipc)
	}
	for _, r := range cfg.Routes {
		res.Routes = append(res.Routes, r.cni())
	}
	return res, nil
}

// staticCheck validates the config and, when the runtime passes the previous
// result, that every configured address is in it.
func staticCheck(_ context.Context, a *cniplug.Args) error {
	cfg, err := loadStaticConfig(a)
	if err != nil {
		return err
	}
	prev, err := a.Conf.PrevResult()
	if err != nil || prev == nil {
		return err
	}
	for _, ad := range cfg.Addresses {
		found := false
		for _, ip := range prev.IPs {
			got, ok := netip.AddrFromSlice(ip.Address.IP)
			if ok && got.Unmap() == ad.Addr.Addr() {
				found = true
				if ad.Gateway.IsValid() {
					gw, _ := netip.AddrFromSlice(ip.Gateway)
					if gw.Unmap() != ad.Gateway {
						return cniplug.Errorf(types.ErrUnknownContainer, "static: address %s has gateway %v in the previous result, the config says %s: run DEL and ADD again", ad.Addr, ip.Gateway, ad.Gateway)
					}
				}
				break
			}
		}
		if !found {
			return cniplug.Errorf(types.ErrUnknownContainer, "static: address %s of the config is not in the previous result of interface %s: run DEL and ADD again", ad.Addr, a.IfName)
		}
	}
	return nil
}
