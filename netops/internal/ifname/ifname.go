// Package ifname checks interface names for netops and its nftables side
// (netops/nft), which name the links it matches but never touch them.
package ifname

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Max is the longest interface name the kernel accepts (IFNAMSIZ-1).
const Max = unix.IFNAMSIZ - 1

// Check reports a usable error, prefixed by what, when name cannot be an
// interface name.
func Check(what, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%s: empty interface name", what)
	case len(name) > Max:
		return fmt.Errorf("%s: interface name %q is longer than %d bytes", what, name, Max)
	case name == "." || name == "..":
		return fmt.Errorf("%s: invalid interface name %q", what, name)
	}
	for _, c := range name {
		if c == '/' || c == ':' || c <= ' ' || c == 0x7f {
			return fmt.Errorf("%s: invalid character %q in interface name %q", what, c, name)
		}
	}
	return nil
}
