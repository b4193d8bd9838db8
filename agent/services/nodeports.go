package services

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// NodePortAddresses is --nodeport-addresses as kube-proxy reads it: the
// node's primary IPs ("primary", kube-proxy's nftables default), or CIDRs
// that select the node's interface addresses; a family no CIDR names is
// served on every address of it (0.0.0.0/0 and ::/0 say so outright).
type NodePortAddresses struct {
	Primary bool
	CIDRs   []netip.Prefix
}

// ParseNodePortAddresses reads the flag's value: "primary", or a
// comma-separated list of CIDRs ("" is "primary").
func ParseNodePortAddresses(s string) (NodePortAddresses, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "primary" {
		return NodePortAddresses{Primary: true}, nil
	}
	var out NodePortAddresses
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "primary" {
			return out, fmt.Errorf("--nodeport-addresses %q: \"primary\" stands alone (or give CIDRs only)", s)
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return out, fmt.Errorf("--nodeport-addresses %q: %q is not a CIDR (e.g. 192.0.2.0/24, or \"primary\"): %w", s, f, err)
		}
		out.CIDRs = append(out.CIDRs, p.Masked())
	}
	return out, nil
}

func (n NodePortAddresses) String() string {
	if n.Primary {
		return "primary"
	}
	var ss []string
	for _, p := range n.CIDRs {
		ss = append(ss, p.String())
	}
	return strings.Join(ss, ",")
}

// cidrs are the CIDRs n selects by, per kube-proxy: the primary IPs as
// host routes, and each family no CIDR names matched whole.
func (n NodePortAddresses) cidrs(hostIPs []netip.Addr) []netip.Prefix {
	var out []netip.Prefix
	if n.Primary {
		for _, a := range hostIPs {
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
		}
	} else {
		out = slices.Clone(n.CIDRs)
	}
	if !slices.ContainsFunc(out, func(p netip.Prefix) bool { return p.Addr().Is4() }) {
		out = append(out, netip.MustParsePrefix("0.0.0.0/0"))
	}
	if !slices.ContainsFunc(out, func(p netip.Prefix) bool { return p.Addr().Is6() }) {
		out = append(out, netip.MustParsePrefix("::/0"))
	}
	return out
}

// Resolve is the addresses of addrs (the node's interfaces') that serve
// NodePorts, sorted, once each, without loopback addresses (kube-proxy's
// nftables mode serves no NodePort on localhost either). all: every
// address of both families does (the health check servers then listen on
// every address).
func (n NodePortAddresses) Resolve(hostIPs, addrs []netip.Addr) (out []netip.Addr, all bool) {
	cidrs := n.cidrs(hostIPs)
	for _, a := range addrs {
		a = a.Unmap()
		if a.IsLoopback() || slices.Contains(out, a) {
			continue
		}
		if slices.ContainsFunc(cidrs, func(p netip.Prefix) bool { return p.Contains(a) }) {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	all = slices.ContainsFunc(cidrs, func(p netip.Prefix) bool { return p.Bits() == 0 && p.Addr().Is4() }) &&
		slices.ContainsFunc(cidrs, func(p netip.Prefix) bool { return p.Bits() == 0 && p.Addr().Is6() })
	return out, all
}
