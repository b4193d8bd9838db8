package netops

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/vishvananda/netlink"
)

// VRF returns the routing table of the VRF device name. A missing device
// wraps ErrNotFound; a device of another kind wraps ErrExists.
func (h *Handle) VRF(name string) (uint32, error) {
	if err := checkIfName("find VRF", name); err != nil {
		return 0, err
	}
	l, err := h.nlh.LinkByName(name)
	if err != nil {
		return 0, fmt.Errorf("find VRF %q in %s: %w", name, h.where(), classify(err))
	}
	v, ok := l.(*netlink.Vrf)
	if !ok {
		return 0, fmt.Errorf("find VRF %q in %s: a %s device of that name is there: %w", name, h.where(), l.Type(), ErrExists)
	}
	return v.Table, nil
}

// EnsureVRF makes sure the VRF device name exists and is up, and returns
// its table. A new VRF gets table, or when table is 0 the lowest table from
// 1 on that no VRF of the namespace uses (the reference vrf's choice). An
// existing VRF with another table than a non-zero table wraps ErrExists, as
// does a device of that name that is not a VRF.
func (h *Handle) EnsureVRF(name string, table uint32) (uint32, error) {
	have, err := h.VRF(name)
	switch {
	case err == nil:
		if table != 0 && have != table {
			return 0, fmt.Errorf("VRF %q in %s has table %d, not %d: %w", name, h.where(), have, table, ErrExists)
		}
		return have, h.SetLinkUp(name)
	case !errors.Is(err, ErrNotFound):
		return 0, err
	}
	if table == 0 {
		if table, err = h.freeVRFTable(); err != nil {
			return 0, err
		}
	}
	attrs := netlink.NewLinkAttrs()
	attrs.Name = name
	if err := h.nlh.LinkAdd(&netlink.Vrf{LinkAttrs: attrs, Table: table}); err != nil {
		return 0, fmt.Errorf("create VRF %q (table %d) in %s: %w", name, table, h.where(), kindErr("vrf", err))
	}
	return table, h.SetLinkUp(name)
}

// freeVRFTable returns the lowest table from 1 on that no VRF uses.
func (h *Handle) freeVRFTable() (uint32, error) {
	links, err := retryDump(h.nlh.LinkList)
	if err != nil {
		return 0, fmt.Errorf("list links in %s: %w", h.where(), classify(err))
	}
	used := map[uint32]bool{}
	for _, l := range links {
		if v, ok := l.(*netlink.Vrf); ok {
			used[v.Table] = true
		}
	}
	t := uint32(1)
	for used[t] {
		t++
	}
	return t, nil
}

// VRFMembers returns the names of the interfaces enslaved to the VRF name.
func (h *Handle) VRFMembers(name string) ([]string, error) {
	v, err := h.LinkByName(name)
	if err != nil {
		return nil, err
	}
	links, err := h.Links()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range links {
		if l.MasterIndex == v.Index {
			out = append(out, l.Name)
		}
	}
	return out, nil
}

// EnslaveToVRF makes dev a member of the VRF vrf as the reference vrf does:
// the main-table routes through dev other than connected and local ones are
// kept before and put into the VRF's table after (the kernel flushes them
// when dev changes master), and the global IPv6 addresses the kernel drops
// are added again. A dev already in vrf is left alone; one with another
// master wraps ErrExists.
func (h *Handle) EnslaveToVRF(vrf, dev string) error {
	fail := func(err error) error {
		return fmt.Errorf("put %q into VRF %q in %s: %w", dev, vrf, h.where(), err)
	}
	table, err := h.VRF(vrf)
	if err != nil {
		return fail(err)
	}
	v, err := h.LinkByName(vrf)
	if err != nil {
		return fail(err)
	}
	l, err := h.nlh.LinkByName(dev)
	if err != nil {
		return fail(classify(err))
	}
	switch m := l.Attrs().MasterIndex; {
	case m == v.Index:
		return nil
	case m != 0:
		return fail(fmt.Errorf("it already has a master (ifindex %d): %w", m, ErrExists))
	}
	before, err := h.globalAddrs(l, netlink.FAMILY_V6)
	if err != nil {
		return fail(err)
	}
	routes, err := retryDump(func() ([]netlink.Route, error) {
		return h.nlh.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{LinkIndex: l.Attrs().Index, Scope: netlink.SCOPE_UNIVERSE},
			netlink.RT_FILTER_OIF|netlink.RT_FILTER_SCOPE)
	})
	if err != nil {
		return fail(classify(err))
	}
	if err := h.nlh.LinkSetMasterByIndex(l, v.Index); err != nil {
		return fail(classify(err))
	}
	after, err := h.globalAddrs(l, netlink.FAMILY_V6)
	if err != nil {
		return fail(err)
	}
	for _, a := range before {
		if containsAddr(after, a) {
			continue
		}
		if err := h.nlh.AddrAdd(l, &a); err != nil {
			return fail(fmt.Errorf("restore address %s: %w", a.IPNet, classify(err)))
		}
		if err := h.waitLocalRoute(l.Attrs().Index, table, a.IP); err != nil {
			return fail(err)
		}
	}
	for _, r := range routes {
		r.Table = int(table)
		if err := h.nlh.RouteReplace(&r); err != nil {
			return fail(fmt.Errorf("route %s into table %d: %w", r, table, classify(err)))
		}
	}
	return nil
}

// waitLocalRoute waits (up to about 2.5 s) for the kernel to add the route
// to the IPv6 address ip through ifindex in table, as it does once DAD is
// through.
func (h *Handle) waitLocalRoute(ifindex int, table uint32, ip net.IP) error {
	filter := &netlink.Route{Dst: &net.IPNet{IP: ip, Mask: net.CIDRMask(128, 128)}, Table: int(table), LinkIndex: ifindex}
	for try, wait := 0, 10*time.Millisecond; ; try, wait = try+1, wait*2 {
		list, err := h.nlh.RouteListFiltered(netlink.FAMILY_V6, filter, netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE|netlink.RT_FILTER_DST)
		if err != nil {
			return fmt.Errorf("routes to %s in table %d: %w", ip, table, classify(err))
		}
		if len(list) > 0 {
			return nil
		}
		if try == 8 {
			return fmt.Errorf("the kernel added no route to %s in table %d", ip, table)
		}
		time.Sleep(wait)
	}
}

func (h *Handle) globalAddrs(l netlink.Link, family int) ([]netlink.Addr, error) {
	list, err := retryDump(func() ([]netlink.Addr, error) { return h.nlh.AddrList(l, family) })
	if err != nil {
		return nil, fmt.Errorf("addresses of %q: %w", l.Attrs().Name, classify(err))
	}
	var out []netlink.Addr
	for _, a := range list {
		if a.Scope == int(netlink.SCOPE_UNIVERSE) {
			out = append(out, a)
		}
	}
	return out, nil
}

func containsAddr(list []netlink.Addr, a netlink.Addr) bool {
	for _, b := range list {
		if b.Equal(a) {
			return true
		}
	}
	return false
}

// ReleaseFromVRF takes dev out of the VRF vrf (when it is in it) and
// deletes the VRF when no interface is left in it. A VRF or dev that is gone
// is not an error. It reports whether the VRF was deleted (or was gone).
func (h *Handle) ReleaseFromVRF(vrf, dev string) (bool, error) {
	fail := func(err error) (bool, error) {
		return false, fmt.Errorf("take %q out of VRF %q in %s: %w", dev, vrf, h.where(), err)
	}
	if _, err := h.VRF(vrf); errors.Is(err, ErrNotFound) {
		return true, nil
	} else if err != nil {
		return fail(err)
	}
	v, err := h.LinkByName(vrf)
	if err != nil {
		return fail(err)
	}
	l, err := h.LinkByName(dev)
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return fail(err)
	case l.MasterIndex == v.Index:
		if err := h.nlh.LinkSetNoMaster(indexOnly(l.Index)); err != nil && !isNotFound(err) {
			return fail(classify(err))
		}
	}
	left, err := h.VRFMembers(vrf)
	if err != nil {
		return fail(err)
	}
	if len(left) > 0 {
		return false, nil
	}
	if err := h.DeleteLink(vrf); err != nil {
		return fail(err)
	}
	return true, nil
}
