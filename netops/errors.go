package netops

import (
	"errors"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ErrNotFound is wrapped by errors about an interface, address, route,
// namespace, sysctl or nftables object that does not exist.
var ErrNotFound = errors.New("not found")

// ErrExists is wrapped by errors about an object that already exists and is
// not the one that was asked for.
var ErrExists = errors.New("already exists")

// ErrNotSupported is wrapped by errors about a feature the kernel lacks
// (EOPNOTSUPP), such as vlan_filtering on a kernel built without
// CONFIG_BRIDGE_VLAN_FILTERING.
var ErrNotSupported = errors.New("not supported by the kernel")

// kernelError keeps the kernel's error text and adds the sentinel that
// classifies it, so that errors.Is matches both.
type kernelError struct {
	sentinel error
	err      error
}

func (e *kernelError) Error() string   { return e.err.Error() }
func (e *kernelError) Unwrap() []error { return []error{e.sentinel, e.err} }

// classify wraps err with ErrNotFound or ErrExists when the kernel's error
// means that; other errors are returned unchanged.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrExists) || errors.Is(err, ErrNotSupported) {
		return err
	}
	var lnf netlink.LinkNotFoundError
	switch {
	case errors.As(err, &lnf),
		errors.Is(err, unix.ENODEV),
		errors.Is(err, unix.ENOENT),
		errors.Is(err, unix.ESRCH),
		errors.Is(err, unix.EADDRNOTAVAIL):
		return &kernelError{sentinel: ErrNotFound, err: err}
	case errors.Is(err, unix.EEXIST):
		return &kernelError{sentinel: ErrExists, err: err}
	case errors.Is(err, unix.EOPNOTSUPP):
		return &kernelError{sentinel: ErrNotSupported, err: err}
	}
	return err
}

// isNotFound reports whether err means that the object does not exist.
func isNotFound(err error) bool {
	return errors.Is(classify(err), ErrNotFound)
}
