package agent

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strings"

	"github.com/cnibox/cnibox/agent/backend"
	"github.com/cnibox/cnibox/netops"
)

// InterfaceOpts choose the node's interface toward the other nodes as
// flanneld's do (its pkg/ipmatch): every --iface in order (a name, or an
// address the interface holds), then every --iface-regex in order (matched
// against the interfaces' addresses of the network's families, then
// against their names), then --iface-can-reach (the interface of the route
// to that address); the first that matches wins, and none matching is an
// error. Without any of them, --public-ip (or --public-ipv6) picks the
// interface that holds it, else the default route's interface does.
type InterfaceOpts struct {
	Ifaces   []string // --iface, each a name or an address
	Regexes  []string // --iface-regex
	CanReach string   // --iface-can-reach: an address
	// PublicIP/PublicIPv6 are published to the other nodes (--public-ip,
	// --public-ipv6, or the node-public-ip annotations); zero = the
	// interface's address.
	PublicIP   netip.Addr
	PublicIPv6 netip.Addr

	res      []*regexp.Regexp
	canReach netip.Addr
}

// Compile checks the expressions and the address of --iface-can-reach.
func (o *InterfaceOpts) Compile() error {
	o.res = o.res[:0]
	for _, s := range o.Regexes {
		re, err := regexp.Compile(s)
		if err != nil {
			return fmt.Errorf("--iface-regex %q: %w", s, err)
		}
		o.res = append(o.res, re)
	}
	o.canReach = netip.Addr{}
	if o.CanReach != "" {
		a, err := netip.ParseAddr(o.CanReach)
		if err != nil {
			return fmt.Errorf("--iface-can-reach %q is not an IP address: give the address of a peer or a gateway", o.CanReach)
		}
		o.canReach = a.Unmap()
	}
	return nil
}

// explicit reports whether any of --iface, --iface-regex, --iface-can-reach
// was given.
func (o *InterfaceOpts) explicit() bool {
	return len(o.Ifaces) > 0 || len(o.Regexes) > 0 || o.CanReach != ""
}

// underlay is the node's interface toward the other nodes and the addresses
// the overlay uses on it.
type underlay = backend.Underlay

// ifaceView is what the selection reads of the kernel.
type ifaceView struct {
	h     *netops.Handle
	links []netops.Link
	addrs map[string][]netip.Prefix
}

func newIfaceView(h *netops.Handle) (*ifaceView, error) {
	links, err := h.Links()
	if err != nil {
		return nil, err
	}
	v := &ifaceView{h: h, links: links, addrs: map[string][]netip.Prefix{}}
	for _, l := range links {
		if v.addrs[l.Name], err = h.Addrs(l.Name); err != nil && !errors.Is(err, netops.ErrNotFound) {
			return nil, err
		}
	}
	return v, nil
}

// holder returns the interface that holds a.
func (v *ifaceView) holder(a netip.Addr) (string, bool) {
	for _, l := range v.links {
		for _, p := range v.addrs[l.Name] {
			if p.Addr() == a {
				return l.Name, true
			}
		}
	}
	return "", false
}

// findUnderlay picks the interface (InterfaceOpts) and its addresses for
// the families in use.
func findUnderlay(h *netops.Handle, o InterfaceOpts, want4, want6 bool) (underlay, error) {
	v, err := newIfaceView(h)
	if err != nil {
		return underlay{}, err
	}
	var c choice
	if !o.explicit() {
		c, err = v.implicit(o, want4, want6)
	} else {
		c, err = v.explicit(o, want4, want6)
	}
	if err != nil {
		return underlay{}, err
	}
	return v.complete(c, o, want4, want6)
}

// choice is a chosen interface and the addresses the match fixed.
type choice struct {
	iface        string
	addr4, addr6 netip.Addr
}

// implicit: the interface of --public-ip (or --public-ipv6), else of the
// default route.
func (v *ifaceView) implicit(o InterfaceOpts, want4, want6 bool) (choice, error) {
	for _, p := range []struct {
		flag string
		a    netip.Addr
	}{{"--public-ip", o.PublicIP}, {"--public-ipv6", o.PublicIPv6}} {
		if !p.a.IsValid() {
			continue
		}
		name, ok := v.holder(p.a)
		if !ok {
			return choice{}, fmt.Errorf("%s %s: no interface holds this address (as flanneld, without --iface the public IP picks the interface): "+
				"behind NAT, name the interface with --iface", p.flag, p.a)
		}
		c := choice{iface: name}
		if p.a.Is4() {
			c.addr4 = p.a
		} else {
			c.addr6 = p.a
		}
		return c, nil
	}
	routes, err := v.h.Routes("")
	if err != nil {
		return choice{}, err
	}
	def := func(v6 bool) string {
		for _, r := range routes {
			if r.Dst.Bits() == 0 && r.Dev != "" && r.Dst.Addr().Is6() == v6 && r.Table == 0 {
				return r.Dev
			}
		}
		return ""
	}
	d4, d6 := def(false), def(true)
	switch {
	case want4 && d4 == "":
		return choice{}, errors.New("no IPv4 default route to find the interface toward the other nodes: set --iface (a name or an address), --iface-regex or --iface-can-reach")
	case want6 && d6 == "":
		return choice{}, errors.New("no IPv6 default route to find the interface toward the other nodes (EnableIPv6): set --iface, --iface-regex or --iface-can-reach")
	case want4 && want6 && d4 != d6:
		return choice{}, fmt.Errorf("the IPv6 default route's interface %s is not the IPv4 default route's %s: the overlay needs one interface; set --iface", d6, d4)
	case want4:
		return choice{iface: d4}, nil
	}
	return choice{iface: d6}, nil
}

// explicit tries --iface, then --iface-regex, then --iface-can-reach.
func (v *ifaceView) explicit(o InterfaceOpts, want4, want6 bool) (choice, error) {
	var tried []string
	for _, s := range o.Ifaces {
		c, err := v.byIface(s, o, want4, want6)
		if err == nil {
			return c, nil
		}
		tried = append(tried, fmt.Sprintf("--iface %s: %v", s, err))
	}
	for i, re := range o.res {
		if c, ok := v.byRegex(re, want4, want6); ok {
			return c, nil
		}
		tried = append(tried, fmt.Sprintf("--iface-regex %s matches no interface or address", o.Regexes[i]))
	}
	if o.canReach.IsValid() {
		dev, src, err := v.h.RouteGet(o.canReach)
		if err == nil {
			c := choice{iface: dev}
			if src.Is4() {
				c.addr4 = src
			} else if src.IsValid() {
				c.addr6 = src
			}
			return c, nil
		}
		tried = append(tried, fmt.Sprintf("--iface-can-reach %s: %v", o.CanReach, err))
	}
	return choice{}, fmt.Errorf("no interface matches the interfaces and expressions given (%s); the node has %s",
		strings.Join(tried, "; "), v.describe(want6 && !want4))
}

// byIface looks one --iface up: an address (the interface that holds it)
// or a name.
func (v *ifaceView) byIface(s string, o InterfaceOpts, want4, want6 bool) (choice, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		for _, l := range v.links {
			if l.Name == s {
				return choice{iface: s}, nil
			}
		}
		return choice{}, errors.New("no such interface")
	}
	a = a.Unmap()
	name, ok := v.holder(a)
	if !ok {
		return choice{}, errors.New("no interface holds this address")
	}
	c := choice{iface: name}
	if a.Is4() {
		c.addr4 = a
	} else {
		c.addr6 = a
	}
	// Dual stack: an IPv6 public address must sit on the same interface
	// (flanneld's rule).
	if want4 && want6 && a.Is4() && o.PublicIPv6.IsValid() {
		n6, ok := v.holder(o.PublicIPv6)
		if !ok {
			return choice{}, fmt.Errorf("--public-ipv6 %s: no interface holds it", o.PublicIPv6)
		}
		if n6 != name {
			return choice{}, fmt.Errorf("the IPv6 interface %s (of --public-ipv6 %s) must be the IPv4 interface %s", n6, o.PublicIPv6, name)
		}
		c.addr6 = o.PublicIPv6
	}
	return c, nil
}

// byRegex matches re against the addresses of the families in use (dual
// stack: an interface needs a matching address of each), then against the
// interface names.
func (v *ifaceView) byRegex(re *regexp.Regexp, want4, want6 bool) (choice, bool) {
	match := func(name string, v6 bool) (netip.Addr, bool) {
		for _, p := range v.addrs[name] {
			if p.Addr().Is6() == v6 && re.MatchString(p.Addr().String()) {
				return p.Addr(), true
			}
		}
		return netip.Addr{}, false
	}
	for _, l := range v.links {
		c := choice{iface: l.Name}
		ok := true
		if want4 {
			c.addr4, ok = match(l.Name, false)
		}
		if ok && want6 {
			c.addr6, ok = match(l.Name, true)
		}
		if ok {
			return c, true
		}
	}
	for _, l := range v.links {
		if re.MatchString(l.Name) {
			return choice{iface: l.Name}, true
		}
	}
	return choice{}, false
}

// describe lists the interfaces with their addresses, for errors.
func (v *ifaceView) describe(v6 bool) string {
	var parts []string
	for _, l := range v.links {
		var as []string
		for _, p := range v.addrs[l.Name] {
			if p.Addr().Is6() == v6 {
				as = append(as, p.Addr().String())
			}
		}
		parts = append(parts, l.Name+":"+fmt.Sprint(as))
	}
	return strings.Join(parts, ", ")
}

// complete fills the chosen interface's MTU, its addresses of the families
// in use (the ones the match fixed, else its first of each family: IPv6
// global ones only) and the public addresses.
func (v *ifaceView) complete(c choice, o InterfaceOpts, want4, want6 bool) (underlay, error) {
	l, err := v.h.LinkByName(c.iface)
	if err != nil {
		return underlay{}, fmt.Errorf("interface %s: %w", c.iface, err)
	}
	u := underlay{Iface: c.iface, MTU: l.MTU}
	for _, p := range v.addrs[c.iface] {
		switch {
		case want4 && p.Addr().Is4() && (p.Addr() == c.addr4 || !c.addr4.IsValid() && !u.Addr4.IsValid()):
			u.Addr4 = p
		case want6 && p.Addr().Is6() && (p.Addr() == c.addr6 || !c.addr6.IsValid() && !u.Addr6.IsValid() && p.Addr().IsGlobalUnicast()):
			u.Addr6 = p
		}
	}
	if want4 {
		u.Public4 = o.PublicIP
		if !u.Public4.IsValid() {
			u.Public4 = u.Addr4.Addr()
		}
	}
	if want6 {
		u.Public6 = o.PublicIPv6
		if !u.Public6.IsValid() {
			u.Public6 = u.Addr6.Addr()
		}
	}
	if want4 && !u.Addr4.IsValid() {
		return underlay{}, fmt.Errorf("interface %s has no IPv4 address for the IPv4 overlay: give it one, or pick another with --iface", u.Iface)
	}
	if want6 && !u.Addr6.IsValid() {
		return underlay{}, fmt.Errorf("interface %s has no global IPv6 address for the IPv6 overlay (EnableIPv6): give it one, or pick another with --iface", u.Iface)
	}
	if u.MTU <= 0 {
		return underlay{}, fmt.Errorf("interface %s reports no MTU", u.Iface)
	}
	return u, nil
}
