package netops_test

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nstest"
)

// routeFrom asks h's kernel how it forwards a packet from src, come in by
// iif, to dst (`ip route get DST from SRC iif IIF`): the interface and
// the gateway, or why not (a martian source, EINVAL: the reverse path
// filter refused it).
func routeFrom(t *testing.T, h *netops.Handle, iif string, src, dst netip.Addr) (string, netip.Addr, error) {
	t.Helper()
	nlh := nstest.Netlink(t, h.Path())
	routes, err := nlh.RouteGetWithOptions(dst.AsSlice(), &netlink.RouteGetOptions{Iif: iif, SrcAddr: src.AsSlice()})
	if err != nil {
		return "", netip.Addr{}, err
	}
	if len(routes) == 0 {
		t.Fatalf("route get %s from %s iif %s: no route", dst, src, iif)
	}
	l, err := nlh.LinkByIndex(routes[0].LinkIndex)
	must(t, err)
	gw, _ := netip.AddrFromSlice(routes[0].Gw)
	return l.Attrs().Name, gw.Unmap(), nil
}

// allRoutes lists the IPv4 routes of every table of h's namespace.
func allRoutes(t *testing.T, h *netops.Handle) []netlink.Route {
	t.Helper()
	nlh := nstest.Netlink(t, h.Path())
	routes, err := nlh.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	must(t, err)
	return routes
}

// routingChanges runs fn and counts the IPv4 route and rule changes of
// the egress tables (netops.EgressTableFirst to EgressTableLast) in h's
// namespace meanwhile: not the kernel's own (a link-local address's
// routes come when its DAD ends, at any time after the lab's links came
// up: a second sync that changed nothing counted 4 on a loaded machine).
func routingChanges(t *testing.T, h *netops.Handle, fn func()) int {
	return egressChanges(t, h, fn, unix.RTNLGRP_IPV4_ROUTE, unix.RTNLGRP_IPV4_RULE)
}

func egressChanges(t *testing.T, h *netops.Handle, fn func(), groups ...uint) int {
	t.Helper()
	ns, err := netns.GetFromPath(h.Path())
	must(t, err)
	defer ns.Close()
	s, err := nl.SubscribeAt(ns, netns.None(), unix.NETLINK_ROUTE, groups...)
	must(t, err)
	defer s.Close()
	fn()
	tv := unix.NsecToTimeval((200 * time.Millisecond).Nanoseconds())
	must(t, s.SetReceiveTimeout(&tv))
	n := 0
	for {
		msgs, _, err := s.Receive()
		if err != nil {
			return n // the timeout: nothing more
		}
		for _, m := range msgs {
			if tb := routingTable(m.Data); tb >= netops.EgressTableFirst && tb <= netops.EgressTableLast {
				n++
			}
		}
	}
}

// routingTable is the table of a route or rule message's body (rtmsg and
// fib_rule_hdr both: the table in byte 4, RTA_TABLE and FRA_TABLE, both
// 15, for a table past 255).
func routingTable(b []byte) int {
	const hdr, attrTable = 12, 15
	if len(b) < hdr {
		return -1
	}
	tb := int(b[4])
	for a := b[hdr:]; len(a) >= 4; {
		l, typ := int(binary.NativeEndian.Uint16(a)), binary.NativeEndian.Uint16(a[2:])&^(unix.NLA_F_NESTED|unix.NLA_F_NET_BYTEORDER)
		if l < 4 || l > len(a) {
			break
		}
		if typ == attrTable && l >= 8 {
			tb = int(binary.NativeEndian.Uint32(a[4:]))
		}
		a = a[min((l+3)&^3, len(a)):]
	}
	return tb
}

// TestSyncEgressRoutes: a node (labtest's host, pods on br0 in the
// cluster network 10.99.0.0/16) with an uplink up0 (the main table's
// default route) and an overlay stand-in ov0. A selected pod's traffic to
// the outside goes to the holder by its table, to the cluster by the main
// table; other pods' by the main table. A second sync changes nothing; a
// changed holder or sources are followed; an empty sync removes every
// rule and route of it and nothing else.
func TestSyncEgressRoutes(t *testing.T) {
	l := labtest.New(t, 2)
	h := l.Host
	for _, dev := range []string{"up0", "ov0"} {
		_, _, err := h.EnsureVeth(netops.VethOpts{HostName: dev, PeerName: "eth0", Peer: openNS(t, "erp")})
		must(t, err)
	}
	must(t, h.EnsureAddr("up0", netip.MustParsePrefix("192.0.2.1/24"), netops.AddrOpts{}))
	must(t, h.EnsureRoute(netops.Route{GW: netip.MustParseAddr("192.0.2.254"), Dev: "up0"}))
	must(t, h.SetSysctl("net.ipv4.ip_forward", "1"))
	// Not the egress routes': a rule at their priority to another table,
	// and that table's route.
	foreign := netops.Rule{Src: netip.MustParsePrefix("10.99.0.9/32"), Table: 200, Priority: netops.EgressRulePriority}
	must(t, h.EnsureRule(foreign))
	must(t, h.EnsureRoute(netops.Route{GW: netip.MustParseAddr("192.0.2.253"), Dev: "up0", Table: 200}))

	p0, _ := labtest.PodAddrs(0)
	p1, _ := labtest.PodAddrs(1)
	pod0, pod1 := p0.Addr(), p1.Addr()
	outside, other := netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("203.0.113.7")
	holder, holder2 := netip.MustParseAddr("10.99.1.0"), netip.MustParseAddr("10.99.2.0")
	cluster := []netip.Prefix{netip.MustParsePrefix("10.99.0.0/16")}
	type hop struct {
		src, dst netip.Addr
		dev      string
		gw       netip.Addr
	}
	main := netip.MustParseAddr("192.0.2.254")
	check := func(t *testing.T, hops ...hop) {
		t.Helper()
		for _, hp := range hops {
			if dev, gw, err := routeFrom(t, h, "br0", hp.src, hp.dst); err != nil || dev != hp.dev || gw != hp.gw {
				t.Errorf("from %s to %s: dev %s via %v (%v), want dev %s via %v", hp.src, hp.dst, dev, gw, err, hp.dev, hp.gw)
			}
		}
	}
	sync := func(t *testing.T, want ...netops.EgressRoute) {
		t.Helper()
		if n := routingChanges(t, h, func() { must(t, h.SyncEgressRoutes(want)) }); n == 0 {
			t.Errorf("the sync changed nothing") // each step changes something
		}
		if n := routingChanges(t, h, func() { must(t, h.SyncEgressRoutes(want)) }); n != 0 {
			t.Errorf("a second sync changed %d routes or rules", n)
		}
	}
	readBack := func(t *testing.T, want ...netops.EgressRoute) {
		t.Helper()
		got, err := h.EgressRoutes()
		must(t, err)
		if !reflect.DeepEqual(got, want) && (len(got) != 0 || len(want) != 0) {
			t.Errorf("EgressRoutes = %+v, want %+v", got, want)
		}
	}
	route := netops.EgressRoute{Table: 53100, Via: holder, Dev: "ov0", OnLink: true, Throw: cluster, Sources: []netip.Addr{pod0}}

	t.Run("one gateway", func(t *testing.T) {
		sync(t, route)
		check(t,
			hop{pod0, outside, "ov0", holder},
			hop{pod0, pod1, "br0", netip.Addr{}}, // the cluster: the main table
			hop{pod1, outside, "up0", main},
		)
		// The reply from the outside, come back over the overlay, passes a
		// strict reverse path filter: its reverse lookup, from the pod,
		// hits the pod's rule. Another pod's would not.
		must(t, h.SetSysctls(
			netops.SysctlSetting{Key: "net.ipv4.conf.all.rp_filter", Value: "1"},
			netops.SysctlSetting{Key: "net.ipv4.conf.ov0.rp_filter", Value: "1"},
		))
		if dev, _, err := routeFrom(t, h, "ov0", outside, pod0); err != nil || dev != "br0" {
			t.Errorf("the reply from %s to %s by ov0: dev %s, %v; want br0 (rp_filter passed)", outside, pod0, dev, err)
		}
		// (the kernel's answer to a martian: EINVAL on 6.18, EXDEV from
		// fib_validate_source on Debian's 6.1)
		if _, _, err := routeFrom(t, h, "ov0", outside, pod1); !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.EXDEV) {
			t.Errorf("a reply from %s to the unselected %s by ov0: %v; want EINVAL or EXDEV (a martian: rp_filter drops it)", outside, pod1, err)
		}
		must(t, h.SetSysctl("net.ipv4.conf.all.rp_filter", "0"))
	})
	t.Run("destinations", func(t *testing.T) {
		r := route
		r.Destinations = []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), cluster[0]} // the cluster's is thrown
		sync(t, r)
		check(t, hop{pod0, outside, "ov0", holder}, hop{pod0, other, "up0", main}, hop{pod0, pod1, "br0", netip.Addr{}})
		r.Destinations = r.Destinations[:1]
		readBack(t, r)
	})
	t.Run("moved, other sources, a second gateway", func(t *testing.T) {
		r := route
		r.Via, r.Sources = holder2, []netip.Addr{pod1}
		r2 := netops.EgressRoute{Table: 53101, Via: netip.MustParseAddr("192.0.2.77"), Dev: "up0", Throw: cluster, Sources: []netip.Addr{pod0}}
		sync(t, r, r2)
		check(t, hop{pod1, outside, "ov0", holder2}, hop{pod0, outside, "up0", r2.Via}, hop{pod1, pod0, "br0", netip.Addr{}})
		readBack(t, r, r2)
	})
	t.Run("none", func(t *testing.T) {
		sync(t)
		check(t, hop{pod0, outside, "up0", main}, hop{pod1, outside, "up0", main})
		readBack(t)
		rules, err := h.Rules()
		must(t, err)
		for _, r := range rules {
			if r.Table >= netops.EgressTableFirst && r.Table <= netops.EgressTableLast {
				t.Errorf("rule %s left", r)
			}
		}
		if rules := len(rules); rules != 1 {
			t.Errorf("%d rules from a source, want 1: the foreign one", rules)
		}
		for _, nr := range allRoutes(t, h) {
			if nr.Table >= netops.EgressTableFirst && nr.Table <= netops.EgressTableLast {
				t.Errorf("route %s left", nr)
			}
		}
		if routes, err := h.TableRoutes("up0", 200); err != nil || len(routes) != 1 {
			t.Errorf("the foreign table's routes: %v, %v; want its one route", routes, err)
		}
	})
}

// TestSyncEgressRoutes6: an IPv6 egress route beside an IPv4 one, both
// thrown the cluster networks of both families (each keeps its own): a
// selected pod's IPv6 traffic to the outside goes to the holder's IPv6
// overlay address, its IPv4 traffic by the IPv4 route, another pod's by
// the main table; a second sync changes nothing; an empty sync removes
// both families' rules and routes.
func TestSyncEgressRoutes6(t *testing.T) {
	l := labtest.New(t, 2)
	h := l.Host
	for _, dev := range []string{"up0", "ov0"} {
		_, _, err := h.EnsureVeth(netops.VethOpts{HostName: dev, PeerName: "eth0", Peer: openNS(t, "erp6")})
		must(t, err)
	}
	must(t, h.EnsureAddr("up0", netip.MustParsePrefix("2001:db8:e6::1/64"), netops.AddrOpts{NoDAD: true}))
	main := netip.MustParseAddr("2001:db8:e6::fe")
	must(t, h.EnsureRoute(netops.Route{Dst: netip.MustParsePrefix("::/0"), GW: main, Dev: "up0"}))
	must(t, h.SetSysctl("net.ipv6.conf.all.forwarding", "1"))
	must(t, h.SetSysctl("net.ipv4.ip_forward", "1"))
	_, p0 := labtest.PodAddrs(0)
	_, p1 := labtest.PodAddrs(1)
	v4, _ := labtest.PodAddrs(0)
	pod0, pod1 := p0.Addr(), p1.Addr()
	outside := netip.MustParseAddr("2001:db8:77::7")
	holder := netip.MustParseAddr("fd00:ee::2")
	cluster := []netip.Prefix{netip.MustParsePrefix("10.99.0.0/16"), netip.MustParsePrefix("fd00:99::/48")}
	r6 := netops.EgressRoute{Table: 53100, Via: holder, Dev: "ov0", OnLink: true, Throw: cluster, Sources: []netip.Addr{pod0}}
	r4 := netops.EgressRoute{Table: 53101, Via: netip.MustParseAddr("10.99.1.0"), Dev: "ov0", OnLink: true, Throw: cluster, Sources: []netip.Addr{v4.Addr()}}
	must(t, h.SyncEgressRoutes([]netops.EgressRoute{r6, r4}))
	if n := routingChanges6(t, h, func() { must(t, h.SyncEgressRoutes([]netops.EgressRoute{r6, r4})) }); n != 0 {
		t.Errorf("a second sync changed %d routes or rules", n)
	}
	for _, hp := range []struct {
		src, dst netip.Addr
		dev      string
		gw       netip.Addr
	}{
		{pod0, outside, "ov0", holder},
		{pod0, pod1, "br0", netip.Addr{}}, // the cluster: thrown
		{pod1, outside, "up0", main},
		{v4.Addr(), netip.MustParseAddr("198.51.100.7"), "ov0", r4.Via},
	} {
		if dev, gw, err := routeFrom(t, h, "br0", hp.src, hp.dst); err != nil || dev != hp.dev || gw != hp.gw {
			t.Errorf("from %s to %s: dev %s via %v (%v), want dev %s via %v", hp.src, hp.dst, dev, gw, err, hp.dev, hp.gw)
		}
	}
	got, err := h.EgressRoutes()
	must(t, err)
	r6.Throw, r4.Throw = cluster[1:], cluster[:1]
	if want := []netops.EgressRoute{r6, r4}; !reflect.DeepEqual(got, want) {
		t.Errorf("EgressRoutes = %+v, want %+v", got, want)
	}
	must(t, h.SyncEgressRoutes(nil))
	if got, err := h.EgressRoutes(); err != nil || len(got) != 0 {
		t.Errorf("EgressRoutes after an empty sync = %+v, %v; want none", got, err)
	}
	if dev, gw, err := routeFrom(t, h, "br0", pod0, outside); err != nil || dev != "up0" || gw != main {
		t.Errorf("after an empty sync from %s to %s: dev %s via %v (%v), want up0 via %v", pod0, outside, dev, gw, err, main)
	}
}

// routingChanges6 is routingChanges for IPv6 routes and rules (and
// IPv4's).
func routingChanges6(t *testing.T, h *netops.Handle, fn func()) int {
	return egressChanges(t, h, fn, unix.RTNLGRP_IPV6_ROUTE, unix.RTNLGRP_IPV6_RULE, unix.RTNLGRP_IPV4_ROUTE, unix.RTNLGRP_IPV4_RULE)
}

// TestSyncEgressRoutesRefuses: a family mix, a table out of the range
// or in two routes, a source in two routes and an unknown device are
// errors, and nothing is changed.
func TestSyncEgressRoutesRefuses(t *testing.T) {
	h := openNS(t, "err")
	_, _, err := h.EnsureVeth(netops.VethOpts{HostName: "ov0", PeerName: "eth0", Peer: openNS(t, "errp")})
	must(t, err)
	ok := netops.EgressRoute{Table: 53100, Via: netip.MustParseAddr("10.99.1.0"), Dev: "ov0", OnLink: true, Sources: []netip.Addr{netip.MustParseAddr("10.99.0.2")}}
	ip6 := netip.MustParseAddr("2001:db8::10")
	with := func(f func(*netops.EgressRoute)) netops.EgressRoute {
		r := ok
		f(&r)
		return r
	}
	for _, tt := range []struct {
		name string
		want []netops.EgressRoute
		says string
	}{
		{"via IPv6, sources IPv4", []netops.EgressRoute{with(func(r *netops.EgressRoute) { r.Via = ip6 })}, "10.99.0.2"},
		{"source IPv6", []netops.EgressRoute{with(func(r *netops.EgressRoute) { r.Sources = []netip.Addr{ip6} })}, ip6.String()},
		{"destination IPv6", []netops.EgressRoute{with(func(r *netops.EgressRoute) { r.Destinations = []netip.Prefix{netip.PrefixFrom(ip6, 64)} })}, ip6.String()},
		{"table", []netops.EgressRoute{with(func(r *netops.EgressRoute) { r.Table = 100 })}, "53355"},
		{"table twice", []netops.EgressRoute{ok, ok}, "two egress routes"},
		{"source twice", []netops.EgressRoute{ok, with(func(r *netops.EgressRoute) { r.Table = 53101 })}, "one egress gateway per pod"},
		{"device", []netops.EgressRoute{with(func(r *netops.EgressRoute) { r.Dev = "nope0" })}, "nope0"},
	} {
		err := h.SyncEgressRoutes(tt.want)
		if err == nil || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("%s: %v; want an error saying %q", tt.name, err, tt.says)
		}
		if strings.Contains(tt.name, "IPv6") && !errors.Is(err, netops.ErrEgressFamily) {
			t.Errorf("%s: %v does not wrap ErrEgressFamily", tt.name, err)
		}
	}
	if rules, err := h.Rules(); err != nil || len(rules) != 0 {
		t.Errorf("rules after the refusals: %v, %v; want none", rules, err)
	}
}
