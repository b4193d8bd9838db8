package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/safchain/ethtool"
	"github.com/vishvananda/netlink"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
)

// pathState writes what decides a packet's cost along the instance's
// paths (issue 53 item 2), per namespace (the nodes and the pods of its
// pairs), to <seq>-<configuration>.txt in the -path-state directory: every link's
// type, MTU, queues, GSO/GRO limits and the offload features it has on,
// the vxlan device's and the bridge's settings, the qdiscs, the routes'
// MTU and MSS, the namespace's nftables base chains (hook, priority, rule
// count) and the sysctls on the path. Two configurations' files side by
// side show where their paths differ.
func (in *instance) pathState(pairs []pair) (string, error) {
	type place struct{ label, path string }
	var places []place
	for _, n := range in.nodes {
		places = append(places, place{"node " + n.name, n.Path})
	}
	for _, p := range pairs {
		places = append(places, place{p.kind + " client", p.cli}, place{p.kind + " server", p.srv})
	}
	var b strings.Builder
	seen := map[string]bool{}
	for _, pl := range places {
		if seen[pl.path] {
			continue
		}
		seen[pl.path] = true
		fmt.Fprintf(&b, "== %s (%s)\n", pl.label, filepath.Base(pl.path))
		if err := netops.InNetns(pl.path, func() error { return describeNS(&b) }); err != nil {
			return "", fmt.Errorf("path state of %s: %w", pl.label, err)
		}
	}
	if err := os.MkdirAll(in.e.o.pathState, 0o755); err != nil {
		return "", err
	}
	file := filepath.Join(in.e.o.pathState, fmt.Sprintf("%d-%s.txt", in.seq, in.c.name))
	return file, os.WriteFile(file, []byte(b.String()), 0o644)
}

// describeNS writes the state of the calling thread's namespace to b.
func describeNS(b *strings.Builder) error {
	for _, k := range []string{"ipv4/ip_forward", "ipv4/conf/all/rp_filter", "bridge/bridge-nf-call-iptables",
		"bridge/bridge-nf-call-ip6tables", "netfilter/nf_conntrack_max"} {
		v, err := os.ReadFile("/proc/sys/net/" + k)
		if err == nil {
			fmt.Fprintf(b, "sysctl %s = %s\n", k, strings.TrimSpace(string(v)))
		}
	}
	links, err := netlink.LinkList()
	if err != nil {
		return err
	}
	et, err := ethtool.NewEthtool()
	if err != nil {
		return err
	}
	defer et.Close()
	names := map[int]string{}
	for _, l := range links {
		names[l.Attrs().Index] = l.Attrs().Name
	}
	for _, l := range links {
		a := l.Attrs()
		fmt.Fprintf(b, "link %s type %s mtu %d txqlen %d queues %d/%d gso %d/%d gro %d master %q\n",
			a.Name, l.Type(), a.MTU, a.TxQLen, a.NumTxQueues, a.NumRxQueues, a.GSOMaxSize, a.GSOMaxSegs, a.GROMaxSize, names[a.MasterIndex])
		switch l := l.(type) {
		case *netlink.Vxlan:
			fmt.Fprintf(b, "  vxlan id %d port %d dev %q learning %v gbp %v udpcsum %v udp6zerocsum tx %v rx %v ttl %d\n",
				l.VxlanId, l.Port, names[l.VtepDevIndex], l.Learning, l.GBP, l.UDPCSum, l.UDP6ZeroCSumTx, l.UDP6ZeroCSumRx, l.TTL)
		case *netlink.Bridge:
			fmt.Fprintf(b, "  bridge multicast_snooping %v vlan_filtering %v\n", deref(l.MulticastSnooping), deref(l.VlanFiltering))
		}
		if qs, err := netlink.QdiscList(l); err == nil {
			var kinds []string
			for _, q := range qs {
				kinds = append(kinds, q.Type())
			}
			fmt.Fprintf(b, "  qdiscs %s\n", strings.Join(kinds, " "))
		}
		if fs, err := et.Features(a.Name); err == nil {
			var on []string
			for f, v := range fs {
				if v {
					on = append(on, f)
				}
			}
			slices.Sort(on)
			fmt.Fprintf(b, "  features on: %s\n", strings.Join(on, " "))
		}
	}
	routes, err := netlink.RouteList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return err
	}
	for _, r := range routes {
		fmt.Fprintf(b, "route %v via %v dev %s table %d mtu %d advmss %d\n", r.Dst, r.Gw, names[r.LinkIndex], r.Table, r.MTU, r.AdvMSS)
	}
	c, err := nftables.New()
	if err != nil {
		return err
	}
	chains, err := c.ListChains()
	if err != nil {
		return err
	}
	for _, ch := range chains {
		if ch.Hooknum == nil {
			continue
		}
		n := "?" // google/nftables cannot list some expressions back
		if rules, err := c.GetRules(ch.Table, ch); err == nil {
			n = fmt.Sprint(len(rules))
		}
		prio := 0
		if ch.Priority != nil {
			prio = int(*ch.Priority)
		}
		fmt.Fprintf(b, "nft %s %s chain %s hook %d priority %d type %s rules %s\n",
			nft.FamilyName(ch.Table.Family), ch.Table.Name, ch.Name, *ch.Hooknum, prio, ch.Type, n)
	}
	return nil
}

func deref[T any](p *T) any {
	if p == nil {
		return "-"
	}
	return *p
}
