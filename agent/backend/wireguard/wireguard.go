// Package wireguard is flannel's wireguard backend: pod traffic between
// nodes goes encrypted through a WireGuard device, flannel-wg (IPv4, or
// both families in the one-device modes) and flannel-wg-v6 (IPv6 in Mode
// separate), each with this node's subnet as its address and a route to
// the whole cluster network. Every other node is a WireGuard peer by the
// public key it publishes in its lease ({"PublicKey": ..., "Port": ...} as
// flannel's BackendData), reached at its public IP and port, allowed its
// subnet.
//
// The private key is kept in /run/flannel/wgkey (WIREGUARD_KEY_FILE), as
// flannel keeps it, and reused across restarts, so peers need not learn a
// new key. Unlike flannel, a peer whose lease goes is removed from the
// device at once, also when the agent missed the event (a restart, a
// broken watch): the device's peers are compared with the leases on every
// full sync.
package wireguard

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/cnibox/cnibox/agent/backend"
	"github.com/cnibox/cnibox/agent/lease"
	"github.com/cnibox/cnibox/agent/netconf"
	"github.com/cnibox/cnibox/internal/atomicfile"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/wg"
)

// Device names, as flannel's.
const (
	Device   = "flannel-wg"
	Device6  = "flannel-wg-v6"
	KeyFile  = "/run/flannel/wgkey"
	KeyEnv   = "WIREGUARD_KEY_FILE"
	typeName = lease.BackendWireGuard
)

// Data is the backend data flannel publishes per family.
type Data struct {
	PublicKey string
	Port      uint16
}

// dev is one device and the family (or families) it carries.
type dev struct {
	name   string
	port   int
	v4, v6 bool
}

// Backend is one node's wireguard backend.
type Backend struct {
	env     backend.Env
	be      netconf.Backend
	log     *slog.Logger
	keyFile string
	priv    wg.Key
	psk     *wg.Key
	devs    []dev
	mtu     int
}

// New reads the configuration; the key and the devices come with Prepare.
func New(env backend.Env) (*Backend, error) {
	c := env.Config
	be := c.Backend
	b := &Backend{env: env, be: be, log: env.Log, keyFile: KeyFile}
	if f, ok := os.LookupEnv(KeyEnv); ok {
		b.keyFile = f
	}
	base := env.Under.MTU
	if be.MTU > 0 {
		base = be.MTU
	}
	b.mtu = base - netconf.WireGuardOverhead
	if b.mtu < 68 || (c.EnableIPv6 && b.mtu < 1280) {
		return nil, fmt.Errorf("%w: wireguard: an MTU of %d leaves the device %d bytes (WireGuard takes %d; IPv6 needs 1280): raise Backend.MTU or the interface's MTU",
			backend.ErrUnusable, base, b.mtu, netconf.WireGuardOverhead)
	}
	if be.PSK != "" {
		k, err := wg.ParseKey(be.PSK)
		if err != nil {
			return nil, fmt.Errorf("wireguard: Backend.PSK: %w", err)
		}
		b.psk = &k
	}
	switch {
	case be.Mode == netconf.ModeSeparate:
		if c.EnableIPv4 {
			b.devs = append(b.devs, dev{name: Device, port: be.ListenPort, v4: true})
		}
		if c.EnableIPv6 {
			b.devs = append(b.devs, dev{name: Device6, port: be.ListenPortV6, v6: true})
		}
	default:
		b.devs = []dev{{name: Device, port: be.ListenPort, v4: c.EnableIPv4, v6: c.EnableIPv6}}
	}
	return b, nil
}

// Type is "wireguard".
func (b *Backend) Type() string { return typeName }

// Devices are flannel-wg and, in Mode separate with IPv6, flannel-wg-v6.
func (b *Backend) Devices() []string {
	out := make([]string, len(b.devs))
	for i, d := range b.devs {
		out[i] = d.name
	}
	return out
}

// MTU is Backend.MTU (or the interface's) less WireGuard's 80 bytes.
func (b *Backend) MTU() int { return b.mtu }

// Accepts reports whether l is a wireguard lease.
func (b *Backend) Accepts(l lease.Lease) bool { return l.Attrs.BackendType == typeName }

// Prepare loads (or makes) the private key and creates the devices with
// it and their listen ports.
func (b *Backend) Prepare(h *netops.Handle) error {
	if b.priv == (wg.Key{}) {
		k, err := loadKey(b.keyFile)
		if err != nil {
			return err
		}
		b.priv = k
	}
	c, err := wg.Open(h)
	if err != nil {
		return err
	}
	defer c.Close()
	for _, d := range b.devs {
		created, err := h.EnsureWireGuard(d.name, b.mtu)
		if errors.Is(err, netops.ErrNotSupported) {
			return fmt.Errorf("%w: wireguard: the kernel has no WireGuard (Linux 5.6 or later, or the wireguard module): %w", backend.ErrUnusable, err)
		}
		if err != nil {
			return err
		}
		if created {
			b.log.Info("created the wireguard device", "device", d.name, "port", d.port, "mtu", b.mtu, "publicKey", b.priv.PublicKey().String())
		}
		have, err := c.Device(d.name)
		if err != nil {
			return err
		}
		if have.PublicKey != b.priv.PublicKey() || have.ListenPort != d.port {
			if err := c.Configure(d.name, b.priv, d.port); err != nil {
				return err
			}
		}
	}
	return nil
}

// loadKey reads the private key file, or writes a new key into it (mode
// 0400, as flannel writes it).
func loadKey(path string) (wg.Key, error) {
	data, err := os.ReadFile(path)
	if err == nil {
		k, err := wg.ParseKey(strings.TrimSpace(string(data)))
		if err != nil {
			return wg.Key{}, fmt.Errorf("wireguard: the private key in %s (%s) is not a WireGuard key: %w; remove the file for a new key", path, KeyEnv, err)
		}
		return k, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return wg.Key{}, fmt.Errorf("wireguard: read the private key: %w", err)
	}
	k, err := wg.GenerateKey()
	if err != nil {
		return wg.Key{}, fmt.Errorf("wireguard: generate a private key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return wg.Key{}, fmt.Errorf("wireguard: keep the private key: %w", err)
	}
	// Atomically and synced: a power cut must not leave an empty key
	// file, which the next start refuses.
	if err := atomicfile.WriteFile(path, []byte(k.String()), 0o400); err != nil {
		return wg.Key{}, fmt.Errorf("wireguard: keep the private key in %s: %w", path, err)
	}
	return k, nil
}

// Publish sets the type and, per family, the public key and the port, as
// flannel does (IPv6's port is ListenPortV6 in every mode).
func (b *Backend) Publish(a *lease.Attrs) {
	a.BackendType = typeName
	pub := b.priv.PublicKey().String()
	if b.env.Config.EnableIPv4 {
		a.Data, _ = json.Marshal(Data{PublicKey: pub, Port: uint16(b.be.ListenPort)})
	}
	if b.env.Config.EnableIPv6 {
		a.Data6, _ = json.Marshal(Data{PublicKey: pub, Port: uint16(b.be.ListenPortV6)})
	}
}

// SetLease gives each device this node's subnet as its address (a /32,
// a /128) and routes the cluster network into it.
func (b *Backend) SetLease(h *netops.Handle, own lease.Lease) error {
	c := b.env.Config
	for _, d := range b.devs {
		for _, f := range []struct {
			on      bool
			sn      netip.Prefix
			network netip.Prefix
		}{{d.v4, own.Subnet, c.Network}, {d.v6, own.Subnet6, c.IPv6Network}} {
			if !f.on || !f.sn.IsValid() {
				continue
			}
			if err := ensureOnlyAddr(h, d.name, netip.PrefixFrom(f.sn.Addr(), f.sn.Addr().BitLen()), f.network); err != nil {
				return err
			}
			if err := h.EnsureRoute(netops.Route{Dst: f.network, Dev: d.name, ScopeLink: true}); err != nil {
				return err
			}
		}
	}
	return nil
}

// ensureOnlyAddr makes want the device's one address of network.
func ensureOnlyAddr(h *netops.Handle, devName string, want, network netip.Prefix) error {
	addrs, err := h.Addrs(devName)
	if err != nil {
		return err
	}
	for _, p := range addrs {
		if p != want && network.Contains(p.Addr()) {
			if err := h.DeleteAddr(devName, p); err != nil {
				return err
			}
		}
	}
	return h.EnsureAddr(devName, want, netops.AddrOpts{NoDAD: true})
}
