package netops

import (
	"errors"

	"github.com/cnibox/cnibox/netops/internal/kerr"
)

// ErrNotFound is wrapped by errors about an interface, address, route,
// namespace, sysctl or nftables object that does not exist (netops/nft's
// errors wrap the same value).
const ErrNotFound = kerr.ErrNotFound

// ErrExists is wrapped by errors about an object that already exists and is
// not the one that was asked for.
const ErrExists = kerr.ErrExists

// ErrNotSupported is wrapped by errors about a feature the kernel lacks
// (EOPNOTSUPP), such as vlan_filtering on a kernel built without
// CONFIG_BRIDGE_VLAN_FILTERING.
const ErrNotSupported = kerr.ErrNotSupported

// classify wraps err with ErrNotFound or ErrExists when the kernel's error
// means that; other errors are returned unchanged.
func classify(err error) error { return kerr.Classify(err) }

// isNotFound reports whether err means that the object does not exist.
func isNotFound(err error) bool {
	return errors.Is(classify(err), ErrNotFound)
}
