package netops

import (
	"errors"
	"fmt"

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
// o.Name (the kernel checks the name there, so a device of that name on the
// node is no conflict); the caller sets it up once its addresses are on. An
// existing 802.1Q device of that name with o.ID is kept; any other device of
// that name is an error that wraps ErrExists. A kernel without 802.1Q
// (no 8021q module) answers with an error that wraps ErrNotSupported.
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
	la.Name, la.ParentIndex, la.MTU = o.Name, master.Index, o.MTU
	if into != h {
		fd, err := into.nsFD()
		if err != nil {
			return Vlan{}, fmt.Errorf("%s: %w", what, err)
		}
		la.Namespace = netlink.NsFd(fd)
	}
	err = h.nlh.LinkAdd(&netlink.Vlan{LinkAttrs: la, VlanId: o.ID})
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return Vlan{}, fmt.Errorf("%s: %w", what, classify(err))
	}
	v, verr := into.VlanByName(o.Name)
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
