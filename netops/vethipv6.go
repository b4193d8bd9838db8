package netops

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/netops/internal/ifname"
)

// VethIPv6 says which IPv6 addresses the ends of a veth pair get
// (VethOpts.IPv6). A pod end that has no IPv6 address of the attachment's
// must have none at all: the kernel's link-local address would reach the
// other pods of a bridge and the node's link-local services, which no
// policy set holds (issue 60).
type VethIPv6 uint8

const (
	// VethIPv6Kernel leaves both ends to the kernel: each gets a link-local
	// address of the namespace's addr_gen_mode once its carrier is on (what
	// the reference plugins leave). For an attachment whose addresses the
	// role does not know (no IPAM).
	VethIPv6Kernel VethIPv6 = iota
	// VethIPv6None gives neither end an IPv6 address: addr_gen_mode none on
	// both, set before the pod end is up (so before any carrier), so the
	// kernel never makes a link-local address. For an attachment without
	// IPv6 addresses.
	VethIPv6None
	// VethIPv6LinkLocal gives the pod end PodLinkLocal(HostName), without
	// DAD, and no address of the kernel's making (addr_gen_mode none); the
	// host end is left to the kernel. For an attachment with IPv6
	// addresses: the source address check binds that link-local address
	// to the host end (netops/nft), so the pod's neighbour discovery
	// passes and another link-local source does not.
	VethIPv6LinkLocal
)

// PodLinkLocal is the link-local address of the pod end of a veth whose
// host end is hostName (VethIPv6LinkLocal; the derivation is in
// netops/internal/ifname).
func PodLinkLocal(hostName string) netip.Addr { return ifname.PodLinkLocal(hostName) }

// in6AddrGenModeNone is IN6_ADDR_GEN_MODE_NONE: the kernel makes no
// link-local (nor SLAAC) address of its own on the link.
const in6AddrGenModeNone = 1

// setVethIPv6 applies o.IPv6 to a pair whose pod end is not up yet (the
// host end has no carrier, so neither end has a link-local address of
// the kernel's): addr_gen_mode by netlink (IFLA_AF_SPEC; the kernel takes
// it on RTM_SETLINK only, not with the RTM_NEWLINK that creates the pair),
// and the pod end's link-local address. No namespace switch, one to three
// messages. existing says the pair was there already (a retried ADD):
// link-local addresses the kernel made meanwhile go.
func (h *Handle) setVethIPv6(o VethOpts, hostIdx, peerIdx int, existing bool) error {
	if o.IPv6 == VethIPv6Kernel {
		return nil
	}
	var keep netip.Addr
	if o.IPv6 == VethIPv6None {
		if err := h.addrGenNone(hostIdx, existing, keep); err != nil {
			return fmt.Errorf("no IPv6 on %q: %w", o.HostName, err)
		}
	} else {
		keep = PodLinkLocal(o.HostName)
	}
	if err := o.Peer.addrGenNone(peerIdx, existing, keep); err != nil {
		return fmt.Errorf("IPv6 of %q in %s: %w", o.PeerName, o.Peer.where(), err)
	}
	if !keep.IsValid() {
		return nil
	}
	ipnet, _ := toIPNet(netip.PrefixFrom(keep, 64))
	err := o.Peer.nlh.AddrAdd(indexOnly(peerIdx), &netlink.Addr{IPNet: ipnet, Flags: unix.IFA_F_NODAD})
	switch {
	case err == nil, errors.Is(err, unix.EEXIST):
		return nil
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EAFNOSUPPORT):
		// IPv6 is off in the pod (disable_ipv6) or in the kernel: the
		// attachment's own addresses fail next, naming theirs.
		return nil
	}
	return fmt.Errorf("add link-local address %s to %q in %s: %w", keep, o.PeerName, o.Peer.where(), classify(err))
}

// addrGenNone sets addr_gen_mode none on the link with index idx; with
// existing, it then removes the link's IPv6 link-local addresses but keep.
// A kernel without IPv6 has nothing to set.
func (h *Handle) addrGenNone(idx int, existing bool, keep netip.Addr) error {
	err := h.nlh.LinkSetIP6AddrGenMode(indexOnly(idx), in6AddrGenModeNone)
	if errors.Is(err, unix.EAFNOSUPPORT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("set addr_gen_mode none: %w", classify(err))
	}
	if !existing {
		return nil
	}
	list, err := retryDump(func() ([]netlink.Addr, error) { return h.nlh.AddrList(indexOnly(idx), netlink.FAMILY_V6) })
	if err != nil {
		return fmt.Errorf("list IPv6 addresses: %w", classify(err))
	}
	for _, a := range list {
		p, ok := fromIPNet(a.IPNet)
		if !ok || !p.Addr().IsLinkLocalUnicast() || p.Addr() == keep {
			continue
		}
		if err := h.nlh.AddrDel(indexOnly(idx), &netlink.Addr{IPNet: a.IPNet}); err != nil && !isNotFound(err) {
			return fmt.Errorf("remove link-local address %s: %w", p, classify(err))
		}
	}
	return nil
}
