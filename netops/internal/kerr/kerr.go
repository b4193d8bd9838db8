// Package kerr holds the error sentinels of netops and its nftables side
// (netops/nft) and the classification of the kernel's errors into them, so
// that both packages wrap the same values: a caller matches either's error
// with errors.Is(err, netops.ErrNotFound).
package kerr

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Sentinel is the type of the sentinels: a constant, so that netops and
// netops/nft re-export the same values as constants, not as package-level
// variables copied at start-up (every CNI call is a fresh process:
// TestNoInitCode).
type Sentinel string

func (s Sentinel) Error() string { return string(s) }

// ErrNotFound is wrapped by errors about an interface, address, route,
// namespace, sysctl or nftables object that does not exist.
const ErrNotFound Sentinel = "not found"

// ErrExists is wrapped by errors about an object that already exists and is
// not the one that was asked for.
const ErrExists Sentinel = "already exists"

// ErrNotSupported is wrapped by errors about a feature the kernel lacks
// (EOPNOTSUPP), such as vlan_filtering on a kernel built without
// CONFIG_BRIDGE_VLAN_FILTERING.
const ErrNotSupported Sentinel = "not supported by the kernel"

// kernelError keeps the kernel's error text and adds the sentinel that
// classifies it, so that errors.Is matches both.
type kernelError struct {
	sentinel error
	err      error
}

func (e *kernelError) Error() string   { return e.err.Error() }
func (e *kernelError) Unwrap() []error { return []error{e.sentinel, e.err} }

// Classify wraps err with ErrNotFound or ErrExists when the kernel's error
// means that; other errors are returned unchanged.
func Classify(err error) error {
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

// Wrap returns err (its text unchanged) wrapping sentinel as well, so that
// errors.Is matches both.
func Wrap(sentinel, err error) error { return &kernelError{sentinel: sentinel, err: err} }

// Where names the network namespace at path in error messages ("" is the
// namespace of the calling process, the host's).
func Where(path string) string {
	if path == "" {
		return "the host namespace"
	}
	return fmt.Sprintf("namespace %q", path)
}
