package netops

import (
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// MaxVlanID is the highest 802.1Q VLAN ID the kernel accepts (4095 is
// reserved).
const MaxVlanID = 4094

// VlanOpts describes an 802.1Q device on a master (lower) interface for
// EnsureVlan.
type VlanOpts struct {
	Name   string // the new device's name, in Into's namespace
	Master string // the lower device, in the Handle's namespace
	// Into is the namespace the device is created in (directly, under its
	// final name); nil means the Handle's own.
	Into *Handle
	ID   int // the VLAN ID, 0..MaxVlanID
	MTU  int // 0 = the master's
}

// Vlan is what EnsureVlan and VlanByName report about an 802.1Q device.
type Vlan struct {
	Link
	ID int // the VLAN ID; meaningful only when Kind is "vlan"
}

// EnsureVlan makes sure the 802.1Q device o describes exists in o.Into. A
// new one is created down, with one RTM_NEWLINK directly in o.Into under
// o.Name (two steps on kernels that look the name up on the master's side,
// see addInto); the caller sets it up once its addresses are on. An existing
// 802.1Q device of that name with o.ID is kept; any other device of that
// name is an error that wraps ErrExists. A master carries each VLAN ID once:
// a second device of o.ID on it (in any namespace) is an error that does not
// wrap ErrExists, since the name is free. A kernel without 802.1Q (no 8021q
// module) answers with an error that wraps ErrNotSupported.
func (h *Handle) EnsureVlan(o VlanOpts) (Vlan, error) {
	if err := checkIfName("ensure vlan", o.Name); err != nil {
		return Vlan{}, err
	}
	into := o.Into
	if into == nil {
		into = h
	}
	what := fmt.Sprintf("ensure vlan %d %q on %q (in %s)", o.ID, o.Name, o.Master, into.where())
	if o.ID < 0 || o.ID > MaxVlanID {
		return Vlan{}, fmt.Errorf("%s: the VLAN ID is not in 0..%d", what, MaxVlanID)
	}
	master, err := h.LinkByName(o.Master)
	if err != nil {
		return Vlan{}, fmt.Errorf("%s: master: %w", what, err)
	}
	la := netlink.NewLinkAttrs()
	la.ParentIndex, la.MTU = master.Index, o.MTU
	if into != h {
		fd, err := into.nsFD()
		if err != nil {
			return Vlan{}, fmt.Errorf("%s: %w", what, err)
		}
		la.Namespace = netlink.NsFd(fd)
	}
	err = h.addInto(into, o.Name, func(name string) error {
		la.Name = name
		return h.nlh.LinkAdd(&netlink.Vlan{LinkAttrs: la, VlanId: o.ID})
	})
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return Vlan{}, fmt.Errorf("%s: %w", what, kindErr("vlan", err))
	}
	v, verr := into.VlanByName(o.Name)
	if err != nil && errors.Is(verr, ErrNotFound) {
		// The kernel's EEXIST when the name is free: the master has a
		// device of that VLAN ID already.
		return Vlan{}, fmt.Errorf("%s: VLAN %d is already in use on %q (by another device of that ID in some namespace): a master carries each VLAN ID once", what, o.ID, o.Master)
	}
	if verr != nil {
		return Vlan{}, fmt.Errorf("%s: %w", what, verr)
	}
	if err != nil && (v.Kind != "vlan" || v.ID != o.ID) {
		return Vlan{}, fmt.Errorf("%s: interface %q already exists in %s (kind %q, VLAN %d): %w", what, o.Name, into.where(), v.Kind, v.ID, ErrExists)
	}
	return v, nil
}

// VlanByName returns the interface called name with its VLAN ID when it is
// an 802.1Q device. The error wraps ErrNotFound when there is none.
func (h *Handle) VlanByName(name string) (Vlan, error) {
	if err := checkIfName("get link", name); err != nil {
		return Vlan{}, err
	}
	l, raw, err := h.getLink(name)
	if err != nil {
		return Vlan{}, err
	}
	v := Vlan{Link: l}
	if l.Kind != "vlan" {
		return v, nil
	}
	nl, err := netlink.LinkDeserialize(nil, raw)
	if err != nil {
		return Vlan{}, fmt.Errorf("get link %q in %s: parse: %w", name, h.where(), err)
	}
	if vl, ok := nl.(*netlink.Vlan); ok {
		v.ID = vl.VlanId
	}
	return v, nil
}

// addInto runs add, which sends the RTM_NEWLINK that creates a device in
// into from h's namespace, with the device's name. Older kernels (6.1 does,
// 6.18 does not) look the name up in the namespace the request is sent in,
// not the one the device goes to, and refuse a name h's namespace has (a
// pod's eth0 made from a node that has an eth0 of its own). Then addInto
// creates the device under a temporary name and renames it in into, as the
// reference plugins always do; newer kernels take the first request.
func (h *Handle) addInto(into *Handle, name string, add func(name string) error) error {
	err := add(name)
	if !errors.Is(err, unix.EEXIST) || into == h {
		return err
	}
	if _, herr := h.LinkByName(name); herr != nil {
		return err // the clash is not with h's name
	}
	if _, ierr := into.LinkByName(name); ierr == nil {
		return err // into has it: the caller judges it
	}
	tmp := fmt.Sprintf("cbxtmp%08x", rand.Uint32())
	if err := add(tmp); err != nil {
		return err
	}
	err = into.withLinkIndex(tmp, func(idx int) error { return into.nlh.LinkSetName(indexOnly(idx), name) })
	delete(into.ifindex, tmp)
	if err != nil {
		_ = into.DeleteLink(tmp)
		return fmt.Errorf("rename %q to %q in %s: %w", tmp, name, into.where(), classify(err))
	}
	return nil
}
