package netops

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// An egress gateway's address (issue 52) is held by one node at a time,
// and only while that node's agent keeps saying so: the agent gives the
// address a short lifetime and refreshes it, so that when the agent dies
// (or its node loses the lease and cannot tell), the kernel removes the
// address by itself and another node can take it without two nodes
// answering for it. The kernel's address expiry runs in check_lifetime
// (net/ipv4/devinet.c), which every address change reschedules at once:
// an address whose valid lifetime (whole seconds) runs out goes within
// about a quarter of a second of its deadline.

// infiniteLifetime is the kernel's INFINITY_LIFE_TIME: no lifetime.
const infiniteLifetime uint32 = 0xffffffff

// lifetimeSeconds is valid rounded up to whole seconds, at least 1.
func lifetimeSeconds(valid time.Duration) int {
	s := int((valid + time.Second - 1) / time.Second)
	return max(s, 1)
}

// EnsureAddrLifetime adds the address p to the interface link, or
// replaces it when it is there (RTM_NEWADDR with NLM_F_REPLACE), with a
// valid and preferred lifetime of valid rounded up to whole seconds (at
// least 1 s). The kernel removes the address by itself when its lifetime
// runs out (within about 0.25 s of it, IPv4 in check_lifetime, IPv6 in
// addrconf_verify), so a caller that stops refreshing it (an agent that
// died) leaves no address behind; an address that was there without a
// lifetime gets one. An IPv6 address skips duplicate address detection
// (IFA_F_NODAD): it is in use at once, its uniqueness being the caller's
// (an election) to keep; and it is deprecated (preferred lifetime 0), so
// that the kernel never chooses it as a source address by itself.
func (h *Handle) EnsureAddrLifetime(link string, p netip.Prefix, valid time.Duration) error {
	ipnet, err := toIPNet(p)
	if err != nil {
		return fmt.Errorf("add address to %q: %w", link, err)
	}
	sec := lifetimeSeconds(valid)
	a := &netlink.Addr{IPNet: ipnet, ValidLft: sec, PreferedLft: sec}
	if p.Addr().Is6() {
		// Deprecated from the start (preferred lifetime 0): the
		// kernel's source address selection (RFC 6724 rule 3) never
		// picks it for the node's own connections nor for a
		// masquerade, which an IPv6 address of the uplink's network
		// would otherwise win against the node's own address (IPv4 has
		// secondary addresses for that); it still receives, and a SNAT
		// to it works.
		a.Flags, a.PreferedLft = unix.IFA_F_NODAD, 0
	}
	err = h.withLinkIndex(link, func(idx int) error { return h.nlh.AddrReplace(indexOnly(idx), a) })
	if err != nil {
		return fmt.Errorf("add address %s to %q with a lifetime of %d s in %s: %w", p, link, sec, h.where(), classify(err))
	}
	return nil
}

// AddrLifetime reports the valid lifetime left of the address p on link:
// found is false when the address is not there, and valid is 0 for an
// address without a lifetime (permanent).
func (h *Handle) AddrLifetime(link string, p netip.Prefix) (valid time.Duration, found bool, err error) {
	var list []netlink.Addr
	err = h.withLinkIndex(link, func(idx int) error {
		var err error
		list, err = retryDump(func() ([]netlink.Addr, error) { return h.nlh.AddrList(indexOnly(idx), netlink.FAMILY_ALL) })
		return err
	})
	if err != nil {
		return 0, false, fmt.Errorf("list addresses of %q in %s: %w", link, h.where(), classify(err))
	}
	for _, a := range list {
		if q, ok := fromIPNet(a.IPNet); !ok || q != p {
			continue
		}
		if uint32(a.ValidLft) == infiniteLifetime || a.Flags&unix.IFA_F_PERMANENT != 0 {
			return 0, true, nil
		}
		return time.Duration(a.ValidLft) * time.Second, true, nil
	}
	return 0, false, nil
}
