package vxlan

import (
	"fmt"
	"net/netip"

	"github.com/cnibox/cnibox/agent/backend"
	"github.com/cnibox/cnibox/agent/netconf"
	"github.com/cnibox/cnibox/netops"
)

// New makes the devices' settings (nothing in the kernel yet: Prepare).
func New(env backend.Env) (*Backend, error) {
	cfg, under := env.Config, env.Under
	mtu4, mtu6, err := DeviceMTUs(cfg, under.MTU)
	if err != nil {
		return nil, err
	}
	b := &Backend{env: env}
	newOverlay := func(v6 bool, local netip.Prefix, network netip.Prefix, mtu int) *overlay {
		return &overlay{
			v6: v6,
			opts: netops.VXLANOpts{
				Name: netconf.DeviceName(cfg.Backend.VNI, v6), VNI: cfg.Backend.VNI, Port: cfg.Backend.Port,
				Local: local.Addr(), Dev: under.Iface, MTU: mtu, GBP: cfg.Backend.GBP, Learning: cfg.Backend.Learning,
				TxChecksumOff: env.TxChecksumOff,
			},
			network: network, iface: under.Iface, under: local, direct: cfg.Backend.DirectRouting, learning: cfg.Backend.Learning,
			log: env.Log,
		}
	}
	if cfg.EnableIPv4 {
		b.v4 = newOverlay(false, under.Addr4, cfg.Network, mtu4)
		b.mtu = mtu4
	}
	if cfg.EnableIPv6 {
		b.v6 = newOverlay(true, under.Addr6, cfg.IPv6Network, mtu6)
		if b.mtu == 0 || mtu6 < b.mtu {
			b.mtu = mtu6
		}
	}
	return b, nil
}

// DeviceMTUs returns the MTU of the IPv4 and the IPv6 VXLAN device.
// Backend.MTU is flannel's: the MTU of the packets on the wire (default:
// the interface's MTU, under); the devices get it minus VXLAN's cost,
// 50 bytes over IPv4 (outer IPv4 20, UDP 8, VXLAN 8, inner Ethernet 14)
// and 70 over IPv6 (outer IPv6 40). flanneld takes 50 for both families.
func DeviceMTUs(cfg *netconf.Config, under int) (mtu4, mtu6 int, err error) {
	base := under
	if cfg.Backend.MTU > 0 {
		base = cfg.Backend.MTU
	}
	mtu4, mtu6 = base-netconf.VXLANOverhead, base-netconf.VXLANOverhead6
	if cfg.EnableIPv4 && mtu4 < 68 {
		return 0, 0, fmt.Errorf("Backend.MTU %d leaves the IPv4 VXLAN device %d bytes (VXLAN over IPv4 takes %d): use at least %d",
			base, mtu4, netconf.VXLANOverhead, 68+netconf.VXLANOverhead)
	}
	if cfg.EnableIPv6 && mtu6 < 1280 {
		return 0, 0, fmt.Errorf("Backend.MTU %d leaves the IPv6 VXLAN device %d bytes, below IPv6's minimum of 1280 (VXLAN over IPv6 takes %d): use at least %d",
			base, mtu6, netconf.VXLANOverhead6, 1280+netconf.VXLANOverhead6)
	}
	return mtu4, mtu6, nil
}
