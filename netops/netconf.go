package netops

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// WatchForwarding reports the namespace's forwarding, IPv4's
// (net.ipv4.ip_forward, which is net.ipv4.conf.all.forwarding) and IPv6's
// (net.ipv6.conf.all.forwarding), each time the kernel announces a change
// of either, until ctx ends: an RTM_NEWNETCONF on RTNLGRP_IPV4_NETCONF or
// RTNLGRP_IPV6_NETCONF for every interface (NETCONFA_IFINDEX_ALL), which a
// write of the sysctl sends when it changes the value. Each event is the
// new value of the family that changed (a caller that needs to know which
// reads the sysctls again). The channel is closed then, or when the
// subscription fails (errs, optional, receives why). It reports changes
// only: a caller reads the sysctls once after it subscribed.
//
// The egress controller uses it to see at once that the bridge role has
// turned forwarding on with the node's first pod (an agent whose /proc/sys
// is read-only cannot turn it on itself; IPv6's it never turns on), on a
// single-stack IPv6 cluster as on an IPv4 one. vishvananda/netlink has no
// netconf subscription, so the socket is its nl.Subscribe and the message
// (struct netconfmsg, then attributes) is read here.
func (h *Handle) WatchForwarding(ctx context.Context, errs func(error)) (<-chan bool, error) {
	var s *nl.NetlinkSocket
	var err error
	if h.path == "" {
		s, err = nl.Subscribe(unix.NETLINK_ROUTE, unix.RTNLGRP_IPV4_NETCONF, unix.RTNLGRP_IPV6_NETCONF)
	} else {
		s, err = nl.SubscribeAt(h.ns, netns.None(), unix.NETLINK_ROUTE, unix.RTNLGRP_IPV4_NETCONF, unix.RTNLGRP_IPV6_NETCONF)
	}
	if err != nil {
		return nil, fmt.Errorf("watch forwarding in %s: %w", h.where(), err)
	}
	updates := make(chan bool, 16)
	done := make(chan struct{})
	go func() {
		<-done
		s.Close() // (wakes the Receive below)
	}()
	go func() {
		defer close(updates)
		for {
			msgs, from, err := s.Receive()
			if err != nil {
				select {
				case <-done:
				default:
					if errs != nil {
						errs(fmt.Errorf("watch forwarding in %s: %w", h.where(), err))
					}
				}
				return
			}
			if from.Pid != nl.PidKernel {
				continue
			}
			for _, m := range msgs {
				if on, ok := allForwarding(m.Header.Type, m.Data); ok {
					select {
					case updates <- on:
					case <-done:
						return
					}
				}
			}
		}
	}()
	return relay(ctx, updates, done, 16, func(on bool) (bool, bool) { return on, true }), nil
}

// From linux/netconf.h (golang.org/x/sys/unix has no names for them).
const (
	netconfaIfindex    = 1  // NETCONFA_IFINDEX
	netconfaForwarding = 2  // NETCONFA_FORWARDING
	netconfaIfindexAll = -1 // NETCONFA_IFINDEX_ALL: net.ipv4.conf.all, net.ipv6.conf.all
)

// allForwarding reads an RTM_NEWNETCONF message's body: the forwarding
// value when it is the one of every interface (net.ipv4.conf.all or
// net.ipv6.conf.all).
func allForwarding(typ uint16, data []byte) (on, ok bool) {
	const netconfmsgLen = 4 // struct netconfmsg { __u8 ncm_family; }, aligned
	if typ != unix.RTM_NEWNETCONF || len(data) < netconfmsgLen || (data[0] != unix.AF_INET && data[0] != unix.AF_INET6) {
		return false, false
	}
	attrs, err := nl.ParseRouteAttr(data[netconfmsgLen:])
	if err != nil {
		return false, false
	}
	all, fwd, haveFwd := false, uint32(0), false
	for _, a := range attrs {
		if len(a.Value) < 4 {
			continue
		}
		v := binary.NativeEndian.Uint32(a.Value)
		switch a.Attr.Type {
		case netconfaIfindex:
			all = int32(v) == netconfaIfindexAll
		case netconfaForwarding:
			fwd, haveFwd = v, true
		}
	}
	return fwd != 0, all && haveFwd
}
