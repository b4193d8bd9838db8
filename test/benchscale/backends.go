package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/netip"
	"time"

	"github.com/cnibox/cnibox/agent/lease"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/wg"
)

// Overlay backend types the etcd runs take (-types).
const (
	typeVXLAN     = "vxlan"
	typeHostGW    = "host-gw"
	typeWireGuard = "wireguard"
	wgDevice      = "flannel-wg"
	wgPort        = 51820
)

// wgKey is peer i's public key (any 32 bytes: the agent only configures
// it).
func wgKey(i int) string {
	var k [32]byte
	k[0], k[1], k[2], k[31] = byte(i>>16), byte(i>>8), byte(i), 0x40
	return base64.StdEncoding.EncodeToString(k[:])
}

// leaseAttrs are what peer p publishes on backend typ, as flanneld does.
func leaseAttrs(p peer, typ string) lease.Attrs {
	switch typ {
	case typeHostGW:
		return lease.Attrs{PublicIP: p.ip, BackendType: lease.BackendHostGW}
	case typeWireGuard:
		d, _ := json.Marshal(struct {
			PublicKey string
			Port      uint16
		}{wgKey(p.index), wgPort})
		return lease.Attrs{PublicIP: p.ip, BackendType: lease.BackendWireGuard, Data: d}
	}
	return lease.Attrs{PublicIP: p.ip, BackendType: lease.BackendVXLAN, VNI: 1, VTEPMAC: p.mac}
}

// kernelHas reports why the kernel cannot run typ (nil: it can).
func kernelHas(typ string) error {
	if typ != typeWireGuard {
		return nil
	}
	h, err := netops.Open("")
	if err != nil {
		return err
	}
	defer h.Close()
	if _, err := h.EnsureWireGuard("wg-probe", 1420); err != nil {
		return err
	}
	return h.DeleteLink("wg-probe")
}

// wgPeers returns the device's peers by their first allowed IP.
func (a *agent) wgPeers() (map[netip.Prefix]wg.Peer, error) {
	c, err := wg.Open(a.h)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	d, err := c.Device(wgDevice)
	if err != nil {
		return nil, err
	}
	out := make(map[netip.Prefix]wg.Peer, len(d.Peers))
	for _, p := range d.Peers {
		if len(p.AllowedIPs) > 0 {
			out[p.AllowedIPs[0]] = p
		}
	}
	return out, nil
}

// wgConverged polls the device until it has every peer (every 10 ms: a
// WireGuard peer has no route or netlink event of its own).
func (a *agent) wgConverged(timeout time.Duration) (time.Time, error) {
	n := 0
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		ps, err := a.wgPeers()
		if err == nil && len(ps) >= a.want {
			return time.Now(), nil
		}
		n = len(ps)
		if ended, err := a.proc.Exited(); ended {
			return time.Time{}, fmt.Errorf("the agent exited (%v) with %d of %d peers:\n%s", err, n, a.want, a.logTail())
		}
	}
	return time.Time{}, fmt.Errorf("%d of %d wireguard peers after %s:\n%s", n, a.want, timeout, a.logTail())
}

// wgRemoved polls the device until the peer allowed sn is gone.
func (a *agent) wgRemoved(sn netip.Prefix, timeout time.Duration) (time.Time, error) {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		ps, err := a.wgPeers()
		if err != nil {
			return time.Time{}, err
		}
		if _, ok := ps[sn]; !ok {
			return time.Now(), nil
		}
	}
	return time.Time{}, fmt.Errorf("the peer of %s is still there after %s", sn, timeout)
}

// wgMismatches counts peers missing or wrong on the device, and extra ones.
func (a *agent) wgMismatches(ps []peer) (int, error) {
	have, err := a.wgPeers()
	if err != nil {
		return 0, err
	}
	bad := 0
	for _, p := range ps {
		h, ok := have[p.subnet]
		if !ok || h.PublicKey.String() != wgKey(p.index) || h.Endpoint != netip.AddrPortFrom(p.ip, wgPort) || len(h.AllowedIPs) != 1 {
			bad++
		}
	}
	if len(have) > len(ps) {
		bad += len(have) - len(ps)
	}
	return bad, nil
}

// hostGWMismatches counts the peers whose route via their public IP on the
// underlay is missing or wrong, and extra routes into the cluster network.
func (a *agent) hostGWMismatches(ps []peer) (int, error) {
	routes, err := a.h.Routes(underlay)
	if err != nil {
		return 0, err
	}
	rs := map[netip.Prefix]netops.Route{}
	for _, r := range routes {
		// (the underlay's own 10.77.0.0/16 lies in the cluster network here)
		if r.GW.IsValid() && clusterNet.Contains(r.Dst.Addr()) && r.Dst.Bits() > clusterNet.Bits() {
			rs[r.Dst] = r
		}
	}
	bad := 0
	for _, p := range ps {
		if r, ok := rs[p.subnet]; !ok || r.GW != p.ip {
			bad++
		}
	}
	if len(rs) > len(ps) {
		bad += len(rs) - len(ps)
	}
	return bad, nil
}

// cleanRoutes deletes the routes into the cluster network that an agent
// left on the underlay (host-gw keeps its routes across a stop), so the
// next run starts from nothing.
func (a *agent) cleanRoutes() {
	routes, err := a.h.Routes(underlay)
	if err != nil {
		return
	}
	for _, r := range routes {
		if r.GW.IsValid() && clusterNet.Contains(r.Dst.Addr()) && r.Dst.Bits() > clusterNet.Bits() {
			a.h.DeleteRoute(r)
		}
	}
}
