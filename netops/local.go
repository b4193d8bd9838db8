package netops

import (
	"errors"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// IsLocalAddr reports whether the Handle's namespace takes a packet to a as
// its own: the kernel's route to a is of type local (`ip route get a` says
// "local"). That holds for the addresses of its interfaces and for all of
// 127.0.0.0/8, and is what nftables' `fib daddr type local` matches. An
// address the namespace has no route to, or only a blackhole, unreachable
// or prohibit route, is not local.
func (h *Handle) IsLocalAddr(a netip.Addr) (bool, error) {
	if !a.IsValid() {
		return false, fmt.Errorf("is %v a local address: invalid address", a)
	}
	rs, err := h.nlh.RouteGet(toIP(a))
	if err != nil {
		// The kernel answers a lookup that ends in no route, or in an
		// unreachable, prohibit or blackhole route, with these errors.
		for _, e := range []error{unix.ENETUNREACH, unix.EHOSTUNREACH, unix.EACCES, unix.EINVAL} {
			if errors.Is(err, e) {
				return false, nil
			}
		}
		return false, fmt.Errorf("route get %s in %s: %w", a, h.where(), classify(err))
	}
	for _, r := range rs {
		if r.Type == unix.RTN_LOCAL {
			return true, nil
		}
	}
	return false, nil
}
