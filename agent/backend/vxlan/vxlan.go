// Package vxlan is flannel's vxlan backend, the default: the devices
// flannel.<VNI> (IPv4) and flannel-v6.<VNI> (IPv6) on the underlay, and per
// peer and family a permanent neighbour (the peer's subnet address -> its
// VTEP MAC), an FDB entry (VTEP MAC -> its public IP) and a route
// "<peer subnet> via <subnet address> dev flannel.<VNI> onlink". With
// DirectRouting a peer on the node's own L2 network is reached by a plain
// route via its public IP on the underlay instead; with Learning the kernel
// learns FDB entries from the traffic (and sync leaves those alone).
//
// The VTEP MAC is this node's identity to its peers, so it survives a
// restart: the device's own when it is still there, else the one this node
// published before (Resume).
package vxlan

import (
	"errors"
	"net/netip"

	"github.com/cnibox/cnibox/agent/backend"
	"github.com/cnibox/cnibox/agent/lease"
	"github.com/cnibox/cnibox/netops"
)

// Backend is one node's vxlan backend: a device per family.
type Backend struct {
	env    backend.Env
	v4, v6 *overlay
	mtu    int
	// prepared: Prepare ran once; a device it has to create later went
	// away under the agent.
	prepared bool
}

func (b *Backend) overlays() []*overlay {
	var out []*overlay
	if b.v4 != nil {
		out = append(out, b.v4)
	}
	if b.v6 != nil {
		out = append(out, b.v6)
	}
	return out
}

// Type is "vxlan".
func (b *Backend) Type() string { return lease.BackendVXLAN }

// Devices are flannel.<VNI> (IPv4) and flannel-v6.<VNI> (IPv6), in that
// order, of the families enabled.
func (b *Backend) Devices() []string {
	var out []string
	for _, ov := range b.overlays() {
		out = append(out, ov.opts.Name)
	}
	return out
}

// Resume takes the VTEP MAC of each family from what this node published
// before, the first of prev that has one; a device still there keeps its
// own (Prepare).
func (b *Backend) Resume(prev ...lease.Attrs) {
	for _, ov := range b.overlays() {
		for _, at := range prev {
			mac := at.VTEPMAC
			if ov.v6 {
				mac = at.VTEPMAC6
			}
			if len(mac) == 6 {
				ov.opts.MAC = mac
				break
			}
		}
	}
}

// Prepare creates the devices, or re-creates one that went away (with the
// MAC it had); the lease's addresses come with SetLease. The first time, a
// device that is there already keeps its MAC.
func (b *Backend) Prepare(h *netops.Handle) error {
	var errs []error
	for _, ov := range b.overlays() {
		if !b.prepared {
			if v, err := h.VXLANByName(ov.opts.Name); err == nil {
				ov.opts.MAC = v.MAC
			}
		}
		created, err := ov.ensureDevice(h)
		if err != nil {
			errs = append(errs, err)
		} else if created && b.prepared {
			b.env.Log.Warn("the vxlan device was missing; re-created it", "device", ov.opts.Name, "mac", ov.opts.MAC.String())
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	b.prepared = true
	return nil
}

// Publish sets the type and each family's VNI and VTEP MAC.
func (b *Backend) Publish(at *lease.Attrs) {
	at.BackendType = lease.BackendVXLAN
	if b.v4 != nil {
		at.VNI, at.VTEPMAC = b.v4.opts.VNI, b.v4.opts.MAC
	}
	if b.v6 != nil {
		at.VNI6, at.VTEPMAC6 = b.v6.opts.VNI, b.v6.opts.MAC
	}
}

// SetLease gives each device its subnet's first address (a /32, a /128).
func (b *Backend) SetLease(h *netops.Handle, own lease.Lease) error {
	if b.v4 != nil {
		b.v4.subnet = own.Subnet
	}
	if b.v6 != nil {
		b.v6.subnet = own.Subnet6
	}
	for _, ov := range b.overlays() {
		if _, err := ov.ensureDevice(h); err != nil {
			return err
		}
	}
	return nil
}

// MTU is the smaller of the devices' MTUs.
func (b *Backend) MTU() int { return b.mtu }

// Accepts takes vxlan leases and leases without a type.
func (b *Backend) Accepts(l lease.Lease) bool {
	return l.Attrs.BackendType == "" || l.Attrs.BackendType == lease.BackendVXLAN
}

// Direct reports whether l's IPv4 subnet is reached by a plain route via
// its public IP (DirectRouting, the peer on this node's L2 network).
func (b *Backend) Direct(l lease.Lease) bool {
	if b.v4 == nil {
		return false
	}
	t, ok := b.v4.target(l)
	return ok && t.direct
}

// Add programs l in every family (replacing prev's entries).
func (b *Backend) Add(h *netops.Handle, l lease.Lease, prev *lease.Lease) error {
	var errs []error
	for _, ov := range b.overlays() {
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
func (b *Backend) Remove(h *netops.Handle, l lease.Lease) error {
	var errs []error
	for _, ov := range b.overlays() {
		if t, has := ov.target(l); has {
			errs = append(errs, ov.remove(h, t))
		}
	}
	return errors.Join(errs...)
}

// Sync makes each device's neighbours, FDB entries and routes (and, with
// DirectRouting, the underlay's routes into the cluster network) match
// peers exactly.
func (b *Backend) Sync(h *netops.Handle, peers []lease.Lease) (removed, added int, err error) {
	for _, ov := range b.overlays() {
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
