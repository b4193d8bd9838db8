package netops

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
)

// DeviceState is what a device of the node is before it moves into a pod:
// what RestoreDevice gives it back (a move between namespaces takes its
// addresses and sets it down; a pod may change its MTU and MAC).
type DeviceState struct {
	Name  string
	Kind  string // "" for a physical device
	MAC   net.HardwareAddr
	MTU   int
	Up    bool
	Addrs []netip.Prefix // without IPv6 link-local ones, which the kernel makes itself
}

// DeviceStateOf reads the state of the interface called name.
func (h *Handle) DeviceStateOf(name string) (DeviceState, error) {
	l, err := h.LinkByName(name)
	if err != nil {
		return DeviceState{}, err
	}
	addrs, err := h.Addrs(name)
	if err != nil {
		return DeviceState{}, err
	}
	return DeviceState{Name: l.Name, Kind: l.Kind, MAC: l.MAC, MTU: l.MTU, Up: l.Up, Addrs: addrs}, nil
}

// LinkByMAC returns the interface whose MAC is mac. The error wraps
// ErrNotFound when there is none.
func (h *Handle) LinkByMAC(mac net.HardwareAddr) (Link, error) {
	links, err := h.Links()
	if err != nil {
		return Link{}, err
	}
	for _, l := range links {
		if l.MAC.String() == mac.String() {
			return l, nil
		}
	}
	return Link{}, fmt.Errorf("no interface with MAC %s in %s: %w", mac, h.where(), ErrNotFound)
}

// RestoreDevice gives the interface called name back the state st: its
// name, MAC and MTU, no alias, its addresses, and up when it was. Each step
// that is already as st says is skipped, so it can run again.
func (h *Handle) RestoreDevice(name string, st DeviceState) error {
	what := fmt.Sprintf("restore %q as %q in %s", name, st.Name, h.where())
	l, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if name != st.Name {
		if _, err := h.LinkByName(st.Name); err == nil {
			return fmt.Errorf("%s: %s has another interface %q: %w", what, h.where(), st.Name, ErrExists)
		}
		if l.Up {
			if err := h.SetLinkDown(name); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			l.Up = false
		}
		err := h.withLinkIndex(name, func(idx int) error { return h.nlh.LinkSetName(indexOnly(idx), st.Name) })
		delete(h.ifindex, name)
		if err != nil {
			return fmt.Errorf("%s: rename: %w", what, classify(err))
		}
	}
	if alias, err := h.LinkAlias(st.Name); err != nil || alias != "" {
		if err := h.setAlias(st.Name, ""); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	if len(st.MAC) > 0 && l.MAC.String() != st.MAC.String() {
		if err := h.SetMAC(st.Name, st.MAC); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	if st.MTU > 0 && l.MTU != st.MTU {
		if err := h.SetMTU(st.Name, st.MTU); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	have, err := h.Addrs(st.Name)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	for _, p := range st.Addrs {
		if slices.Contains(have, p) {
			continue
		}
		if err := h.EnsureAddr(st.Name, p, AddrOpts{NoDAD: true}); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	if st.Up && !l.Up {
		if err := h.SetLinkUp(st.Name); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	return nil
}
