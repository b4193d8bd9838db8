package netops

import (
	"fmt"

	"github.com/vishvananda/netlink"
)

// EnsureWireGuard creates a WireGuard device with the MTU, or sets the MTU
// of the one there, and brings it up; created reports that it is new. Its
// keys and peers are set through netops/wg (WireGuard's generic netlink
// API, which only the agent links). A link of that name of another kind is
// an error; a kernel without WireGuard answers ErrNotSupported.
func (h *Handle) EnsureWireGuard(name string, mtu int) (created bool, err error) {
	if err := checkIfName("ensure wireguard", name); err != nil {
		return false, err
	}
	l, err := h.LinkByName(name)
	switch {
	case err != nil && !isNotFound(err):
		return false, err
	case err == nil && l.Kind != "wireguard":
		return false, fmt.Errorf("ensure wireguard %q in %s: a %s link of that name exists: %w (remove it)", name, h.where(), l.Kind, ErrExists)
	case err == nil:
		if mtu > 0 && l.MTU != mtu {
			if err := h.SetMTU(name, mtu); err != nil {
				return false, err
			}
		}
	default:
		if err := h.nlh.LinkAdd(&netlink.Wireguard{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: mtu}}); err != nil {
			return false, fmt.Errorf("create wireguard %q in %s: %w", name, h.where(), classify(err))
		}
		delete(h.ifindex, name)
		created = true
	}
	return created, h.SetLinkUp(name)
}

// Do runs fn in the handle's namespace (on a thread of its own when the
// handle is another namespace's): a socket fn opens belongs to that
// namespace for as long as it lives.
func (h *Handle) Do(fn func() error) error { return h.inNS(fn) }
