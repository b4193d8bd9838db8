package netops

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
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
		if bytes.Equal(l.MAC, mac) {
			return l, nil
		}
	}
	return Link{}, fmt.Errorf("no interface with MAC %s in %s: %w", mac, h.where(), ErrNotFound)
}

// LinkAlias returns the alias (ifalias) of the interface called name.
func (h *Handle) LinkAlias(name string) (string, error) {
	_, raw, err := h.linkOf("get link", name)
	if err != nil {
		return "", err
	}
	v, err := attrOf(raw[unix.SizeofIfInfomsg:], unix.IFLA_IFALIAS)
	if err != nil {
		return "", fmt.Errorf("get link %q in %s: %w", name, h.where(), err)
	}
	return unix.ByteSliceToString(v), nil
}

// LinksByAlias returns the interfaces whose alias is alias.
func (h *Handle) LinksByAlias(alias string) ([]Link, error) {
	links, err := h.Links()
	if err != nil {
		return nil, err
	}
	var out []Link
	for _, l := range links {
		if a, err := h.LinkAlias(l.Name); err == nil && a == alias {
			out = append(out, l)
		}
	}
	return out, nil
}

// MoveOpts says where MoveLink moves an interface.
type MoveOpts struct {
	Name    string  // the interface, in the Handle's namespace
	Into    *Handle // the namespace it goes to
	NewName string  // its name there; "" keeps Name
	// Alias, when not nil, becomes its alias ("" clears it).
	Alias *string
}

// MoveLink moves an interface into another namespace, renames it and sets
// its alias with one netlink request (by index, so a name the target has
// does not clash: the kernel names it NewName on the way). The kernel sets
// a moved device down and drops its addresses and routes. A name NewName
// that Into already has is an error that wraps ErrExists, and nothing moves.
// If the kernel moved the device but refused the rest, MoveLink moves it
// back and reports the error. It returns the interface in Into.
func (h *Handle) MoveLink(o MoveOpts) (Link, error) {
	newName := cmp.Or(o.NewName, o.Name)
	what := fmt.Sprintf("move %q from %s to %s as %q", o.Name, h.where(), o.Into.where(), newName)
	if err := checkIfName(what, o.Name); err != nil {
		return Link{}, err
	}
	if err := checkIfName(what, newName); err != nil {
		return Link{}, err
	}
	l, err := h.LinkByName(o.Name)
	if err != nil {
		return Link{}, fmt.Errorf("%s: %w", what, err)
	}
	if _, err := o.Into.LinkByName(newName); err == nil {
		return Link{}, fmt.Errorf("%s: %s has an interface %q: %w", what, o.Into.where(), newName, ErrExists)
	}
	fd, err := o.Into.nsFD()
	if err != nil {
		return Link{}, fmt.Errorf("%s: %w", what, err)
	}
	req := nl.NewNetlinkRequest(unix.RTM_NEWLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(l.Index)
	req.AddData(msg)
	req.AddData(nl.NewRtAttr(unix.IFLA_NET_NS_FD, u32(fd)))
	if newName != o.Name {
		req.AddData(nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated(newName)))
	}
	if o.Alias != nil {
		req.AddData(nl.NewRtAttr(unix.IFLA_IFALIAS, []byte(*o.Alias)))
	}
	_, err = h.rtExec(req, 0)
	delete(h.ifindex, o.Name)
	if err != nil {
		err = fmt.Errorf("%s: %w", what, classify(err))
		if _, lerr := o.Into.LinkByName(o.Name); lerr == nil && newName != o.Name {
			// Moved, but not renamed: back where it was.
			if _, berr := o.Into.MoveLink(MoveOpts{Name: o.Name, Into: h}); berr != nil {
				err = errors.Join(err, berr)
			}
		}
		return Link{}, err
	}
	moved, err := o.Into.LinkByName(newName)
	if err != nil {
		return Link{}, fmt.Errorf("%s: %w", what, err)
	}
	return moved, nil
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
		if err := h.setLink("clear alias", st.Name, 0, 0, nl.NewRtAttr(unix.IFLA_IFALIAS, nil)); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	if len(st.MAC) > 0 && !bytes.Equal(l.MAC, st.MAC) {
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
