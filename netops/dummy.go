package netops

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// EnsureDummy makes sure a dummy device called name exists in the Handle's
// namespace. A new one is created down, with the kernel's MTU (1500) and a
// random MAC; the caller sets it up once its addresses are on. An existing
// dummy of that name is kept; any other device of that name is an error
// that wraps ErrExists. A kernel without dummy devices (no dummy module)
// answers with an error that wraps ErrNotSupported. DeleteLink removes it.
func (h *Handle) EnsureDummy(name string) (Link, error) {
	what := fmt.Sprintf("ensure dummy %q in %s", name, h.where())
	if err := checkIfName(what, name); err != nil {
		return Link{}, err
	}
	la := netlink.NewLinkAttrs()
	la.Name = name
	err := h.nlh.LinkAdd(&netlink.Dummy{LinkAttrs: la})
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return Link{}, fmt.Errorf("%s: %w", what, kindErr("dummy", err))
	}
	l, lerr := h.LinkByName(name)
	if lerr != nil {
		return Link{}, fmt.Errorf("%s: %w", what, lerr)
	}
	if err != nil && l.Kind != "dummy" {
		return Link{}, fmt.Errorf("%s: interface %q already exists (kind %q): %w", what, name, l.Kind, ErrExists)
	}
	return l, nil
}
