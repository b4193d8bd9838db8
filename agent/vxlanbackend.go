package agent

import (
	"context"
	"errors"
	"net/netip"

	"github.com/cnibox/cnibox/agent/lease"
	"github.com/cnibox/cnibox/agent/netconf"
	"github.com/cnibox/cnibox/netops"
)

// vxlanBackend is the agent's own vxlan path (overlay.go) behind the
// backend interface: the devices flannel.<VNI> and flannel-v6.<VNI>, a
// neighbour, an FDB entry and a route per peer.
type vxlanBackend struct{ a *agent }

// startVXLAN makes the VXLAN devices, keeping the VTEP MAC of a previous
// run.
func (a *agent) startVXLAN(ctx context.Context) error {
	a.be = vxlanBackend{a}
	cfg, under := a.cfg, a.under
	mtu4, mtu6, err := deviceMTUs(cfg, under.MTU)
	if err != nil {
		return err
	}
	newOverlay := func(v6 bool, local netip.Prefix, network netip.Prefix, mtu int) *overlay {
		return &overlay{
			v6: v6,
			opts: netops.VXLANOpts{
				Name: netconf.DeviceName(cfg.Backend.VNI, v6), VNI: cfg.Backend.VNI, Port: cfg.Backend.Port,
				Local: local.Addr(), Dev: under.Iface, MTU: mtu, GBP: cfg.Backend.GBP, Learning: cfg.Backend.Learning,
				TxChecksumOff: a.o.TxChecksumOff,
			},
			network: network, iface: under.Iface, under: local, direct: cfg.Backend.DirectRouting, learning: cfg.Backend.Learning,
			log: a.log,
		}
	}
	if cfg.EnableIPv4 {
		a.v4 = newOverlay(false, under.Addr4, cfg.Network, mtu4)
		a.mtu = mtu4
	}
	if cfg.EnableIPv6 {
		a.v6 = newOverlay(true, under.Addr6, cfg.IPv6Network, mtu6)
		if a.mtu == 0 || mtu6 < a.mtu {
			a.mtu = mtu6
		}
	}

	// The VTEP MAC survives restarts: the device's own if it is still
	// there, else the one this node published before, else the store's.
	existing, found, err := a.o.Manager.Existing(ctx, cfg, under.Public4)
	if err != nil {
		a.log.Warn("cannot look up this node's previous lease", "err", err)
	}
	for _, ov := range a.overlays() {
		if v, err := a.h.VXLANByName(ov.opts.Name); err == nil {
			ov.opts.MAC = v.MAC
			continue
		}
		if found {
			if mac := pick(ov.v6, existing.Attrs.VTEPMAC, existing.Attrs.VTEPMAC6); len(mac) == 6 {
				ov.opts.MAC = mac
				continue
			}
		}
		if st, ok, _ := storedState(a.o.DataDir, a.deviceName()); ok {
			if mac, ok := storedMAC(st.Lease, ov.v6, under, a.o.NodeName); ok {
				ov.opts.MAC = mac
			}
		}
	}
	for _, ov := range a.overlays() {
		if _, err := ov.ensureDevice(a.h); err != nil {
			return err
		}
	}
	return nil
}

func (b vxlanBackend) Type() string { return lease.BackendVXLAN }

func (b vxlanBackend) Devices() []string {
	var out []string
	for _, ov := range b.a.overlays() {
		out = append(out, ov.opts.Name)
	}
	return out
}

// Prepare re-creates a device that went away; the lease's addresses come
// with SetLease.
func (b vxlanBackend) Prepare(h *netops.Handle) error {
	var errs []error
	for _, ov := range b.a.overlays() {
		created, err := ov.ensureDevice(h)
		if err != nil {
			errs = append(errs, err)
		} else if created && b.a.ready {
			b.a.log.Warn("the vxlan device was missing; re-created it", "device", ov.opts.Name, "mac", ov.opts.MAC.String())
		}
	}
	return errors.Join(errs...)
}

func (b vxlanBackend) Publish(at *lease.Attrs) {
	at.BackendType = lease.BackendVXLAN
	if a := b.a; a.v4 != nil {
		at.VNI, at.VTEPMAC = a.v4.opts.VNI, a.v4.opts.MAC
	}
	if a := b.a; a.v6 != nil {
		at.VNI6, at.VTEPMAC6 = a.v6.opts.VNI, a.v6.opts.MAC
	}
}

func (b vxlanBackend) SetLease(h *netops.Handle, own lease.Lease) error {
	if b.a.v4 != nil {
		b.a.v4.subnet = own.Subnet
	}
	if b.a.v6 != nil {
		b.a.v6.subnet = own.Subnet6
	}
	for _, ov := range b.a.overlays() {
		if _, err := ov.ensureDevice(h); err != nil {
			return err
		}
	}
	return nil
}

func (b vxlanBackend) MTU() int { return b.a.mtu }

// Accepts takes vxlan leases and leases without a type.
func (b vxlanBackend) Accepts(l lease.Lease) bool {
	return l.Attrs.BackendType == "" || l.Attrs.BackendType == lease.BackendVXLAN
}

// Add programs l in every family (replacing prev's entries).
func (b vxlanBackend) Add(h *netops.Handle, l lease.Lease, prev *lease.Lease) error {
	var errs []error
	for _, ov := range b.a.overlays() {
		t, has := ov.target(l)
		var old *target
		if prev != nil {
			if ot, ok := ov.target(*prev); ok {
				old = &ot
			}
		}
		switch {
		case !has && old != nil:
			errs = append(errs, ov.remove(h, *old))
		case has:
			errs = append(errs, ov.add(h, t, old))
		}
	}
	return errors.Join(errs...)
}

// Remove deletes l's entries in every family.
func (b vxlanBackend) Remove(h *netops.Handle, l lease.Lease) error {
	var errs []error
	for _, ov := range b.a.overlays() {
		if t, has := ov.target(l); has {
			errs = append(errs, ov.remove(h, t))
		}
	}
	return errors.Join(errs...)
}

func (b vxlanBackend) Sync(h *netops.Handle, peers []lease.Lease) (removed, added int, err error) {
	for _, ov := range b.a.overlays() {
		targets := map[netip.Prefix]target{}
		for _, l := range peers {
			if t, has := ov.target(l); has {
				targets[t.subnet] = t
			}
		}
		r, a, err := ov.sync(h, targets)
		removed, added = removed+r, added+a
		if err != nil {
			return removed, added, err
		}
	}
	return removed, added, nil
}
