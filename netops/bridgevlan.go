package netops

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// PortVlanOpts is what SetPortVlans gives a bridge port.
type PortVlanOpts struct {
	Access          int   // PVID, egress untagged (0: none)
	Trunk           []int // VIDs the port carries tagged
	PreserveDefault bool  // keep VID 1 as it is (else it is removed, or kept as PVID for a trunk without Access)
}

// SetPortVlans sets the VLANs of a port of a bridge with vlan_filtering:
// Access as PVID and egress untagged, Trunk tagged. Without PreserveDefault
// the port's VLANs it had before (VID 1) are removed first; a trunk without
// Access gets VID 1 as its PVID, as in the reference plugin.
func (h *Handle) SetPortVlans(port string, o PortVlanOpts) error {
	for _, v := range append([]int{o.Access}, o.Trunk...) {
		if v < 0 || v > 4094 {
			return fmt.Errorf("set vlans of %q: vid %d is not in 1..4094", port, v)
		}
	}
	if o.Access == 0 && len(o.Trunk) == 0 {
		return nil
	}
	err := h.withLinkIndex(port, func(idx int) error {
		l := indexOnly(idx)
		if !o.PreserveDefault {
			err := h.nlh.BridgeVlanDel(l, 1, false, false, false, false)
			if err != nil && !isNotFound(err) {
				return err
			}
		}
		if o.Access != 0 {
			if err := h.nlh.BridgeVlanAdd(l, uint16(o.Access), true, true, false, false); err != nil {
				return err
			}
		}
		for _, v := range o.Trunk {
			if err := h.nlh.BridgeVlanAdd(l, uint16(v), false, false, false, false); err != nil {
				return err
			}
		}
		if o.Access == 0 {
			return h.nlh.BridgeVlanAdd(l, 1, true, true, false, false)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("set vlans of %q in %s: %w", port, h.where(), classify(err))
	}
	return nil
}

// BridgeVlanLinkName is the name of the 802.1Q interface of VLAN vid on
// bridge br: "<br>.<vid>".
func BridgeVlanLinkName(br string, vid int) string {
	return fmt.Sprintf("%s.%d", br, vid)
}

// EnsureBridgeVlanLink makes the bridge itself a tagged member of VLAN vid
// ("bridge vlan add vid V dev BR self") and an 802.1Q interface
// "<br>.<vid>" on it, up, with the bridge's MTU; it returns its name. An
// existing interface of that name is reused if it is that VLAN of that bridge.
func (h *Handle) EnsureBridgeVlanLink(br string, vid int) (string, error) {
	name := BridgeVlanLinkName(br, vid)
	if vid < 1 || vid > 4094 {
		return "", fmt.Errorf("vlan interface of %q: vid %d is not in 1..4094", br, vid)
	}
	if len(name) > unix.IFNAMSIZ-1 {
		return "", fmt.Errorf("vlan interface %q of bridge %q: the name is longer than 15 bytes: use a shorter bridge name", name, br)
	}
	brl, err := h.nlh.LinkByName(br)
	if err != nil {
		return "", fmt.Errorf("vlan interface %q: bridge %q in %s: %w", name, br, h.where(), classify(err))
	}
	if err := h.nlh.BridgeVlanAdd(brl, uint16(vid), false, false, true, false); err != nil {
		return "", fmt.Errorf("add vid %d to bridge %q itself in %s: %w", vid, br, h.where(), classify(err))
	}
	l, err := h.nlh.LinkByName(name)
	switch {
	case err == nil:
		v, ok := l.(*netlink.Vlan)
		if !ok || v.VlanId != vid || v.ParentIndex != brl.Attrs().Index {
			return "", fmt.Errorf("vlan interface %q in %s: %w (a %s, not VLAN %d of %q): remove it", name, h.where(), ErrExists, l.Type(), vid, br)
		}
	case isNotFound(err):
		la := netlink.NewLinkAttrs()
		la.Name = name
		la.ParentIndex = brl.Attrs().Index
		la.MTU = brl.Attrs().MTU
		if err := h.nlh.LinkAdd(&netlink.Vlan{LinkAttrs: la, VlanId: vid}); err != nil && !errors.Is(err, unix.EEXIST) {
			return "", fmt.Errorf("create vlan interface %q in %s: %w", name, h.where(), classify(err))
		}
		if l, err = h.nlh.LinkByName(name); err != nil {
			return "", fmt.Errorf("vlan interface %q in %s: %w", name, h.where(), classify(err))
		}
	default:
		return "", fmt.Errorf("vlan interface %q in %s: %w", name, h.where(), classify(err))
	}
	if err := h.setUpByIndex(l.Attrs().Index); err != nil {
		return "", fmt.Errorf("set %q up in %s: %w", name, h.where(), err)
	}
	return name, nil
}
