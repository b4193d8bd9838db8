package netops

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

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
	newName := o.NewName
	if newName == "" {
		newName = o.Name
	}
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
	return o.Into.LinkByName(newName)
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

// setAlias sets the alias of the interface called name ("" clears it).
func (h *Handle) setAlias(name, alias string) error {
	return h.setLink("set alias", name, 0, 0, nl.NewRtAttr(unix.IFLA_IFALIAS, []byte(alias)))
}
