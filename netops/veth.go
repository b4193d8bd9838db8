package netops

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// VethOpts describes a veth pair for EnsureVeth.
type VethOpts struct {
	HostName string  // host end, in the namespace of the Handle
	PeerName string  // container end (e.g. "eth0"), created directly in Peer's namespace
	Peer     *Handle // the pod namespace

	MTU     int              // both ends; 0 = kernel default
	HostMAC net.HardwareAddr // optional
	PeerMAC net.HardwareAddr // optional; a random locally administered one when nil
	TxQLen  int              // both ends; 0 = kernel default

	Master      string // bridge (or other master) to enslave the host end to; "" = none
	MasterIndex int    // optional ifindex of Master (e.g. from EnsureBridge), saves its lookup

	IPv6 VethIPv6 // the ends' IPv6 addresses (vethipv6.go); zero: the kernel's
}

// EnsureVeth makes sure the veth pair o describes exists, with the host end
// up and enslaved to o.Master, and the peer end up, with the IPv6
// addresses o.IPv6 says (set before the peer is up).
//
// A new pair is created with one RTM_NEWLINK: the peer directly in the pod
// namespace under its final name, the host end already enslaved and up. The
// peer is set up afterwards (the kernel refuses to open a veth before its
// pair is complete).
//
// When o.HostName exists and its peer is o.PeerName in o.Peer's namespace, the
// pair is kept (and its master and up state fixed). When o.PeerName exists in
// the pod namespace otherwise, the error wraps ErrExists. A veth called
// o.HostName whose peer is something else is a leftover: it is deleted and the
// pair created again.
func (h *Handle) EnsureVeth(o VethOpts) (host Link, peer Link, err error) {
	if err := checkIfName("ensure veth", o.HostName); err != nil {
		return Link{}, Link{}, err
	}
	if err := checkIfName("ensure veth", o.PeerName); err != nil {
		return Link{}, Link{}, err
	}
	if o.Peer == nil {
		return Link{}, Link{}, fmt.Errorf("ensure veth %q: no peer namespace", o.HostName)
	}
	what := fmt.Sprintf("ensure veth %q (peer %q in %s)", o.HostName, o.PeerName, o.Peer.where())

	masterIdx := o.MasterIndex
	if masterIdx == 0 && o.Master != "" {
		if masterIdx, _, err = h.linkIndex(o.Master); err != nil {
			return Link{}, Link{}, fmt.Errorf("%s: master: %w", what, err)
		}
	}
	peerMAC := o.PeerMAC
	if peerMAC == nil {
		peerMAC = RandomMAC()
	}

	for attempt := 0; ; attempt++ {
		host, peer, err = h.addVeth(o, masterIdx, peerMAC)
		if err == nil {
			return host, peer, nil
		}
		if !errors.Is(err, unix.EEXIST) || attempt > 0 {
			return Link{}, Link{}, fmt.Errorf("%s: %w", what, classify(err))
		}
		// One of the names is taken: find out by which.
		var done bool
		host, peer, done, err = h.existingVeth(o, masterIdx)
		if err != nil {
			return Link{}, Link{}, fmt.Errorf("%s: %w", what, err)
		}
		if done {
			return host, peer, nil
		}
	}
}

// addVeth creates the pair with one RTM_NEWLINK and sets the peer up.
func (h *Handle) addVeth(o VethOpts, masterIdx int, peerMAC net.HardwareAddr) (Link, Link, error) {
	peerNS, err := o.Peer.nsFD()
	if err != nil {
		return Link{}, Link{}, err
	}
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Change, msg.Flags = unix.IFF_UP, unix.IFF_UP
	attrs := []nl.NetlinkRequestData{nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated(o.HostName))}
	if o.MTU > 0 {
		attrs = append(attrs, nl.NewRtAttr(unix.IFLA_MTU, u32(o.MTU)))
	}
	if o.TxQLen > 0 {
		attrs = append(attrs, nl.NewRtAttr(unix.IFLA_TXQLEN, u32(o.TxQLen)))
	}
	if len(o.HostMAC) > 0 {
		attrs = append(attrs, nl.NewRtAttr(unix.IFLA_ADDRESS, []byte(o.HostMAC)))
	}
	if masterIdx != 0 {
		attrs = append(attrs, nl.NewRtAttr(unix.IFLA_MASTER, u32(masterIdx)))
	}
	info := nl.NewRtAttr(unix.IFLA_LINKINFO, nil)
	info.AddRtAttr(nl.IFLA_INFO_KIND, nl.NonZeroTerminated("veth"))
	data := info.AddRtAttr(nl.IFLA_INFO_DATA, nil)
	p := data.AddRtAttr(nl.VETH_INFO_PEER, nil)
	nl.NewIfInfomsgChild(p, unix.AF_UNSPEC)
	p.AddRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated(o.PeerName))
	p.AddRtAttr(unix.IFLA_ADDRESS, []byte(peerMAC))
	if o.MTU > 0 {
		p.AddRtAttr(unix.IFLA_MTU, u32(o.MTU))
	}
	if o.TxQLen > 0 {
		p.AddRtAttr(unix.IFLA_TXQLEN, u32(o.TxQLen))
	}
	p.AddRtAttr(unix.IFLA_NET_NS_FD, u32(peerNS))
	attrs = append(attrs, info)

	host, echoed, err := h.createLink(msg, attrs...)
	if err != nil {
		return Link{}, Link{}, err
	}
	if !echoed {
		if host, err = h.LinkByName(o.HostName); err != nil {
			return Link{}, Link{}, err
		}
	}
	// The kernel echoes the link before it enslaves it.
	host.MasterIndex = masterIdx
	peer := Link{
		Name:      o.PeerName,
		Index:     host.PeerIndex,
		Kind:      "veth",
		MAC:       peerMAC,
		MTU:       host.MTU,
		PeerIndex: host.Index,
	}
	if peer.Index == 0 {
		if peer, err = o.Peer.LinkByName(o.PeerName); err != nil {
			return Link{}, Link{}, err
		}
	}
	if err := h.setVethIPv6(o, host.Index, peer.Index, false); err != nil {
		_ = h.DeleteLink(o.HostName) // the pair is not what was asked for
		return Link{}, Link{}, err
	}
	if err := o.Peer.setUpByIndex(peer.Index); err != nil {
		return Link{}, Link{}, fmt.Errorf("set %q up in %s: %w", o.PeerName, o.Peer.where(), err)
	}
	peer.Up = true
	o.Peer.remember(peer)
	return host, peer, nil
}

// existingVeth handles the names of a pair being taken. It returns done with
// the pair when it is the one asked for; it deletes a leftover host end and
// returns !done so the caller creates the pair again.
func (h *Handle) existingVeth(o VethOpts, masterIdx int) (host, peer Link, done bool, err error) {
	peer, perr := o.Peer.LinkByName(o.PeerName)
	if perr != nil && !errors.Is(perr, ErrNotFound) {
		return Link{}, Link{}, false, perr
	}
	host, herr := h.LinkByName(o.HostName)
	if herr != nil && !errors.Is(herr, ErrNotFound) {
		return Link{}, Link{}, false, herr
	}
	switch {
	case perr == nil && herr == nil && isPair(host, peer):
		if err := h.setVethIPv6(o, host.Index, peer.Index, true); err != nil {
			return Link{}, Link{}, false, err
		}
		if masterIdx != 0 && host.MasterIndex != masterIdx {
			if err := h.nlh.LinkSetMasterByIndex(indexOnly(host.Index), masterIdx); err != nil {
				return Link{}, Link{}, false, fmt.Errorf("enslave %q: %w", o.HostName, classify(err))
			}
			host.MasterIndex = masterIdx
		}
		if !host.Up {
			if err := h.setUpByIndex(host.Index); err != nil {
				return Link{}, Link{}, false, fmt.Errorf("set %q up: %w", o.HostName, err)
			}
			host.Up = true
		}
		if !peer.Up {
			if err := o.Peer.setUpByIndex(peer.Index); err != nil {
				return Link{}, Link{}, false, fmt.Errorf("set %q up in %s: %w", o.PeerName, o.Peer.where(), err)
			}
			peer.Up = true
		}
		return host, peer, true, nil
	case perr == nil:
		return Link{}, Link{}, false, fmt.Errorf("interface %q already exists in %s: %w", o.PeerName, o.Peer.where(), ErrExists)
	case herr == nil && host.Kind != "veth":
		return Link{}, Link{}, false, fmt.Errorf("interface %q already exists in %s and is not a veth (kind %q): %w",
			o.HostName, h.where(), host.Kind, ErrExists)
	case herr == nil:
		// A leftover of an earlier pair (its peer is gone or elsewhere).
		if err := h.DeleteLink(o.HostName); err != nil {
			return Link{}, Link{}, false, err
		}
	}
	return Link{}, Link{}, false, nil
}

// isPair reports whether host and peer are the two ends of one veth pair.
func isPair(host, peer Link) bool {
	return host.Kind == "veth" && peer.Kind == "veth" &&
		host.PeerIndex == peer.Index && peer.PeerIndex == host.Index
}

// setUpByIndex sets the link with index idx up.
func (h *Handle) setUpByIndex(idx int) error {
	return classify(h.nlh.LinkSetUp(indexOnly(idx)))
}
