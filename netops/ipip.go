package netops

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// IPIPOpts describe an IPv4-in-IPv4 tunnel device that takes packets from
// any remote (flannel's flannel.ipip): the kernel's own tunl0 has local and
// remote "any"; this one has Local set, so the kernel hands it the packets
// sent to Local and leaves tunl0 to whoever uses it.
type IPIPOpts struct {
	Name  string
	Local netip.Addr // the underlay address
	MTU   int
}

// EnsureIPIP creates the tunnel, or fixes the one there: a tunnel with
// another local address or with a remote is re-created, the MTU set, the
// device brought up. created reports that it is new. A link of that name
// of another kind is an error (it is not ours to delete).
func (h *Handle) EnsureIPIP(o IPIPOpts) (created bool, err error) {
	if err := checkIfName("ensure ipip", o.Name); err != nil {
		return false, err
	}
	if !o.Local.Is4() {
		return false, fmt.Errorf("ensure ipip %q: local address %s is not IPv4", o.Name, o.Local)
	}
	l, err := h.nlh.LinkByName(o.Name)
	switch {
	case err != nil && !isNotFound(err):
		return false, fmt.Errorf("ensure ipip %q in %s: %w", o.Name, h.where(), classify(err))
	case err == nil:
		t, ok := l.(*netlink.Iptun)
		if !ok {
			return false, fmt.Errorf("ensure ipip %q in %s: a %s link of that name exists: %w (remove it)", o.Name, h.where(), l.Type(), ErrExists)
		}
		if fromIP(t.Local) != o.Local || (t.Remote != nil && !t.Remote.IsUnspecified()) {
			if err := h.DeleteLink(o.Name); err != nil {
				return false, err
			}
			l = nil
		}
	}
	if l == nil || err != nil {
		link := &netlink.Iptun{LinkAttrs: netlink.LinkAttrs{Name: o.Name, MTU: o.MTU}, Local: toIP(o.Local)}
		if err := h.nlh.LinkAdd(link); err != nil {
			return false, fmt.Errorf("create ipip %q in %s: %w", o.Name, h.where(), classify(err))
		}
		delete(h.ifindex, o.Name)
		created = true
	} else if o.MTU > 0 && l.Attrs().MTU != o.MTU {
		if err := h.SetMTU(o.Name, o.MTU); err != nil {
			return false, err
		}
	}
	return created, h.SetLinkUp(o.Name)
}
