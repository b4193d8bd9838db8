// Package wg sets a WireGuard device's keys and peers through WireGuard's
// generic netlink API, with the field's library (golang.zx2c4.com/
// wireguard/wgctrl). It is apart from netops because only cnibox-agent
// needs it: cnibox (every CNI call a fresh process) does not link it
// (TestLeanBinary). The device itself is netops.EnsureWireGuard's.
package wg

import (
	"fmt"
	"net"
	"net/netip"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/cnibox/cnibox/netops"
)

// Key is a WireGuard key (private, public or pre-shared).
type Key = wgtypes.Key

// GenerateKey returns a new private key.
func GenerateKey() (Key, error) { return wgtypes.GeneratePrivateKey() }

// ParseKey parses a key in base64, as wg(8) prints it.
func ParseKey(s string) (Key, error) { return wgtypes.ParseKey(s) }

// Peer is one peer of a device.
type Peer struct {
	PublicKey    Key
	PresharedKey *Key // nil: none
	Endpoint     netip.AddrPort
	AllowedIPs   []netip.Prefix
	// Keepalive: the persistent keepalive interval; 0 = off.
	Keepalive time.Duration
	// What Device reads besides (SetPeers ignores them): the last
	// handshake, bytes received and sent.
	LastHandshake time.Time
	RxBytes       int64
	TxBytes       int64
}

// Device is what a device holds.
type Device struct {
	PublicKey  Key
	ListenPort int
	Peers      []Peer
}

// Client talks to the WireGuard devices of one namespace.
type Client struct{ c *wgctrl.Client }

// Open opens a client in h's namespace.
func Open(h *netops.Handle) (*Client, error) {
	var c *wgctrl.Client
	err := h.Do(func() error {
		var err error
		c, err = wgctrl.New()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open wireguard's netlink API: %w", err)
	}
	return &Client{c: c}, nil
}

// Close closes the client.
func (c *Client) Close() error { return c.c.Close() }

// Device reads the device called name.
func (c *Client) Device(name string) (Device, error) {
	d, err := c.c.Device(name)
	if err != nil {
		return Device{}, fmt.Errorf("read wireguard device %q: %w", name, err)
	}
	out := Device{PublicKey: d.PublicKey, ListenPort: d.ListenPort, Peers: make([]Peer, 0, len(d.Peers))}
	for _, p := range d.Peers {
		pr := Peer{PublicKey: p.PublicKey, Keepalive: p.PersistentKeepaliveInterval,
			LastHandshake: p.LastHandshakeTime, RxBytes: p.ReceiveBytes, TxBytes: p.TransmitBytes}
		if p.PresharedKey != (Key{}) {
			psk := p.PresharedKey
			pr.PresharedKey = &psk
		}
		if p.Endpoint != nil {
			pr.Endpoint = p.Endpoint.AddrPort()
			pr.Endpoint = netip.AddrPortFrom(pr.Endpoint.Addr().Unmap(), pr.Endpoint.Port())
		}
		for _, ipn := range p.AllowedIPs {
			if pfx, ok := toPrefix(ipn); ok {
				pr.AllowedIPs = append(pr.AllowedIPs, pfx)
			}
		}
		out.Peers = append(out.Peers, pr)
	}
	return out, nil
}

// Configure sets the device's private key and listen port; its peers stay.
func (c *Client) Configure(name string, private Key, port int) error {
	if err := c.c.ConfigureDevice(name, wgtypes.Config{PrivateKey: &private, ListenPort: &port}); err != nil {
		return fmt.Errorf("configure wireguard device %q: %w", name, err)
	}
	return nil
}

// SetPeers adds the peers, or replaces what the device has of each
// (endpoint, allowed IPs, pre-shared key, keepalive); other peers stay.
func (c *Client) SetPeers(name string, peers []Peer) error {
	if len(peers) == 0 {
		return nil
	}
	cfg := wgtypes.Config{Peers: make([]wgtypes.PeerConfig, 0, len(peers))}
	for _, p := range peers {
		pc := wgtypes.PeerConfig{PublicKey: p.PublicKey, ReplaceAllowedIPs: true, PersistentKeepaliveInterval: &p.Keepalive,
			PresharedKey: p.PresharedKey}
		if pc.PresharedKey == nil {
			pc.PresharedKey = &Key{} // all zeros: none
		}
		if p.Endpoint.IsValid() {
			pc.Endpoint = net.UDPAddrFromAddrPort(p.Endpoint)
		}
		for _, a := range p.AllowedIPs {
			pc.AllowedIPs = append(pc.AllowedIPs, net.IPNet{IP: a.Addr().AsSlice(), Mask: net.CIDRMask(a.Bits(), a.Addr().BitLen())})
		}
		cfg.Peers = append(cfg.Peers, pc)
	}
	if err := c.c.ConfigureDevice(name, cfg); err != nil {
		return fmt.Errorf("set %d peers of wireguard device %q: %w", len(peers), name, err)
	}
	return nil
}

// RemovePeers removes the peers with these public keys; a key the device
// does not have is no error.
func (c *Client) RemovePeers(name string, keys []Key) error {
	if len(keys) == 0 {
		return nil
	}
	cfg := wgtypes.Config{}
	for _, k := range keys {
		cfg.Peers = append(cfg.Peers, wgtypes.PeerConfig{PublicKey: k, Remove: true})
	}
	if err := c.c.ConfigureDevice(name, cfg); err != nil {
		return fmt.Errorf("remove %d peers of wireguard device %q: %w", len(keys), name, err)
	}
	return nil
}

func toPrefix(n net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	if a.Is4In6() && ones > 32 {
		ones -= 96
	}
	return netip.PrefixFrom(a.Unmap(), ones), true
}
