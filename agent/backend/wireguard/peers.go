package wireguard

import (
	"encoding/json"
	"errors"
	"net/netip"
	"slices"

	"github.com/cnibox/cnibox/agent/lease"
	"github.com/cnibox/cnibox/agent/netconf"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/wg"
)

// peerOn is a peer on one device.
type peerOn struct {
	dev  string
	peer wg.Peer
}

// data decodes one family's backend data; ok is false without a usable key.
func data(raw json.RawMessage) (Data, wg.Key, bool) {
	var d Data
	if len(raw) == 0 || json.Unmarshal(raw, &d) != nil {
		return Data{}, wg.Key{}, false
	}
	k, err := wg.ParseKey(d.PublicKey)
	return d, k, err == nil
}

// peers returns what l is on each device, as flannel's
// handleSubnetEvents makes it: in Mode separate a peer per family and
// device, allowed that family's subnet, at the public IP of that family
// and the port the peer published (this node's own when it published
// none, as older flannel did); in the one-device modes one peer allowed
// both subnets, keyed by the IPv6 data when the network has IPv6, at the
// IPv4 or IPv6 endpoint as Mode says (auto: the peer's IPv4 address
// unless only its IPv6 one is public).
func (b *Backend) peers(l lease.Lease) []peerOn {
	c, be := b.env.Config, b.be
	d4, k4, ok4 := data(l.Attrs.Data)
	d6, k6, ok6 := data(l.Attrs.Data6)
	port := func(p uint16, own int) uint16 {
		if p == 0 {
			return uint16(own)
		}
		return p
	}
	var ep4, ep6 netip.AddrPort
	if l.Attrs.PublicIP.IsValid() {
		ep4 = netip.AddrPortFrom(l.Attrs.PublicIP, port(d4.Port, be.ListenPort))
	}
	if l.Attrs.PublicIPv6.IsValid() {
		ep6 = netip.AddrPortFrom(l.Attrs.PublicIPv6, port(d6.Port, be.ListenPortV6))
	}
	mk := func(k wg.Key, ep netip.AddrPort, allowed ...netip.Prefix) wg.Peer {
		return wg.Peer{PublicKey: k, PresharedKey: b.psk, Endpoint: ep, AllowedIPs: allowed, Keepalive: be.PersistentKeepaliveInterval}
	}
	sn4 := c.EnableIPv4 && l.Subnet.IsValid() && c.Network.Contains(l.Subnet.Addr())
	sn6 := c.EnableIPv6 && l.Subnet6.IsValid() && c.IPv6Network.Contains(l.Subnet6.Addr())
	if be.Mode == netconf.ModeSeparate {
		var out []peerOn
		for _, d := range b.devs {
			switch {
			case d.v4 && sn4 && ok4 && ep4.IsValid():
				out = append(out, peerOn{d.name, mk(k4, ep4, l.Subnet)})
			case d.v6 && sn6 && ok6 && ep6.IsValid():
				out = append(out, peerOn{d.name, mk(k6, ep6, l.Subnet6)})
			}
		}
		return out
	}
	key, ok := k4, ok4
	if c.EnableIPv6 {
		key, ok = k6, ok6
	}
	var allowed []netip.Prefix
	if sn4 {
		allowed = append(allowed, l.Subnet)
	}
	if sn6 {
		allowed = append(allowed, l.Subnet6)
	}
	// The one device listens on ListenPort, yet flannel publishes
	// ListenPortV6 in the IPv6 data in every mode, so flanneld's Mode ipv6
	// (and auto when it picks IPv6) dials a port nothing listens on unless
	// the two are equal. Here the IPv6 endpoint takes the port of the
	// peer's IPv4 data, else this node's ListenPort (net-conf.json is the
	// cluster's): where every node listens in these modes.
	if l.Attrs.PublicIPv6.IsValid() {
		ep6 = netip.AddrPortFrom(l.Attrs.PublicIPv6, port(d4.Port, be.ListenPort))
	}
	ep := ep4
	switch be.Mode {
	case netconf.ModeIPv6:
		ep = ep6
	case netconf.ModeAuto:
		ep = b.selectEndpoint(ep4, ep6)
	}
	if !ok || len(allowed) == 0 || !ep.IsValid() {
		return nil
	}
	return []peerOn{{b.devs[0].name, mk(key, ep, allowed...)}}
}

// selectEndpoint is flannel's Mode auto: IPv4 when the peer has no IPv6
// address or its IPv4 one is public (and this node has IPv4), IPv6 when
// the peer's IPv6 address and this node's are public, else IPv4.
func (b *Backend) selectEndpoint(ep4, ep6 netip.AddrPort) netip.AddrPort {
	u := b.env.Under
	if !ep6.IsValid() {
		return ep4
	}
	if ep4.IsValid() && !ep4.Addr().IsPrivate() && u.Public4.IsValid() {
		return ep4
	}
	if !ep6.Addr().IsPrivate() && u.Public6.IsValid() && !u.Public6.IsPrivate() {
		return ep6
	}
	return ep4
}

// Add sets l's peers; a key prev had on a device that l no longer has
// there is removed.
func (b *Backend) Add(h *netops.Handle, l lease.Lease, prev *lease.Lease) error {
	c, err := wg.Open(h)
	if err != nil {
		return err
	}
	defer c.Close()
	now := b.peers(l)
	var errs []error
	if prev != nil {
		for _, old := range b.peers(*prev) {
			if !slices.ContainsFunc(now, func(p peerOn) bool { return p.dev == old.dev && p.peer.PublicKey == old.peer.PublicKey }) {
				errs = append(errs, c.RemovePeers(old.dev, []wg.Key{old.peer.PublicKey}))
			}
		}
	}
	for _, p := range now {
		errs = append(errs, c.SetPeers(p.dev, []wg.Peer{p.peer}))
	}
	return errors.Join(errs...)
}

// Remove removes l's peers.
func (b *Backend) Remove(h *netops.Handle, l lease.Lease) error {
	c, err := wg.Open(h)
	if err != nil {
		return err
	}
	defer c.Close()
	var errs []error
	for _, p := range b.peers(l) {
		errs = append(errs, c.RemovePeers(p.dev, []wg.Key{p.peer.PublicKey}))
	}
	return errors.Join(errs...)
}

// Sync makes every device's peers the leases' exactly: a peer of no lease
// (a node gone while the agent was not looking) is removed, a missing or
// different one set. Two leases with one key (a node that leased anew
// before its old lease expired) make one peer allowed both subnets.
func (b *Backend) Sync(h *netops.Handle, leases []lease.Lease) (removed, added int, err error) {
	c, err := wg.Open(h)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	want := map[string]map[wg.Key]wg.Peer{}
	for _, d := range b.devs {
		want[d.name] = map[wg.Key]wg.Peer{}
	}
	for _, l := range leases {
		for _, p := range b.peers(l) {
			if w, ok := want[p.dev][p.peer.PublicKey]; ok {
				p.peer.AllowedIPs = append(w.AllowedIPs, p.peer.AllowedIPs...)
			}
			want[p.dev][p.peer.PublicKey] = p.peer
		}
	}
	for _, d := range b.devs {
		have, err := c.Device(d.name)
		if err != nil {
			return removed, added, err
		}
		var gone []wg.Key
		same := map[wg.Key]bool{}
		for _, p := range have.Peers {
			w, ok := want[d.name][p.PublicKey]
			switch {
			case !ok:
				gone = append(gone, p.PublicKey)
			case samePeer(p, w):
				same[p.PublicKey] = true
			}
		}
		var set []wg.Peer
		for k, p := range want[d.name] {
			if !same[k] {
				set = append(set, p)
			}
		}
		if err := c.RemovePeers(d.name, gone); err != nil {
			return removed, added, err
		}
		removed += len(gone)
		if err := c.SetPeers(d.name, set); err != nil {
			return removed, added, err
		}
		added += len(set)
	}
	return removed, added, nil
}

// samePeer reports whether the device's peer have is w.
func samePeer(have, w wg.Peer) bool {
	if have.Endpoint != w.Endpoint || have.Keepalive != w.Keepalive || (have.PresharedKey == nil) != (w.PresharedKey == nil) ||
		(have.PresharedKey != nil && *have.PresharedKey != *w.PresharedKey) || len(have.AllowedIPs) != len(w.AllowedIPs) {
		return false
	}
	for _, a := range w.AllowedIPs {
		if !slices.Contains(have.AllowedIPs, a) {
			return false
		}
	}
	return true
}
