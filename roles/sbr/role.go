package sbr

import (
	"context"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/chain"
	"github.com/cnibox/cnibox/roles/internal/podns"
)

// Role is the "sbr" role: source-based routing for CNI_IFNAME, chained
// after a main plugin.
var Role = &cniplug.Role{
	Name: "sbr",
	About: "sbr sets up source-based routing in the pod: each address of CNI_IFNAME gets a routing table of its own " +
		"(the first free one from 100 on) holding the interface's routes, and a rule 'from <address> lookup <table>', " +
		"so replies leave by the interface the request came in on (a pod with several interfaces). With 'table' set " +
		"it adds only the rules to that table. It runs chained after a main plugin; DEL removes the rules.",
	Verbs: &chain.Verbs[*sbrConf]{Parse: parseSbrConf, Add: sbrAdd, Check: sbrCheck, Del: sbrDel},

	Known: &known,
}

// sbrAddr is one address of CNI_IFNAME in prevResult.
type sbrAddr struct {
	ip     netip.Prefix // the address with its subnet's length
	gw     netip.Addr
	single netip.Prefix // the address alone (/32, /128): the rule's source
}

// sbrAddrs returns the addresses of prevResult that belong to ifname (or to
// no interface), as the reference picks them.
func sbrAddrs(prev *current.Result, ifname string) []sbrAddr {
	var out []sbrAddr
	for _, ipc := range prev.IPs {
		if ipc.Interface != nil {
			i := *ipc.Interface
			if i >= 0 && i < len(prev.Interfaces) && prev.Interfaces[i].Name != ifname {
				continue
			}
		}
		a, ok := netip.AddrFromSlice(ipc.Address.IP)
		if !ok {
			continue
		}
		a = a.Unmap()
		ones, _ := ipc.Address.Mask.Size()
		gw, _ := netip.AddrFromSlice(ipc.Gateway)
		out = append(out, sbrAddr{ip: netip.PrefixFrom(a, ones), gw: gw.Unmap(), single: netip.PrefixFrom(a, a.BitLen())})
	}
	return out
}

func sbrAdd(_ context.Context, a *cniplug.Args, c *sbrConf, prev *current.Result) (_ types.Result, err error) {
	if len(prev.IPs) == 0 {
		return nil, cniplug.Errorf(types.ErrInvalidNetworkConfig, "prevResult has no IP addresses for interface %q: sbr routes by source address, so the plugin before it must assign some", a.IfName)
	}
	addrs := sbrAddrs(prev, a.IfName)
	pod, err := podns.Open(a.Netns)
	if err != nil {
		return nil, err
	}
	defer pod.Close()
	var undo cniplug.Undo
	defer undo.Finish(&err)
	if c.table != 0 {
		for _, ad := range addrs {
			if err := sbrRule(pod, netops.Rule{Src: ad.single, Table: c.table}, &undo); err != nil {
				return nil, err
			}
		}
		undo.Discard()
		return prev, nil
	}
	if err := sbrRoutes(pod, a.IfName, c, addrs, &undo); err != nil {
		return nil, err
	}
	undo.Discard()
	return prev, nil
}

// sbrRule adds a rule and pushes its undo (when it was not there before).
func sbrRule(pod *netops.Handle, r netops.Rule, undo *cniplug.Undo) error {
	have, err := sbrHasRule(pod, r.Src, r.Table)
	if err != nil {
		return err
	}
	if have {
		return nil
	}
	if err := pod.EnsureRule(r); err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "sbr: %w", err)
	}
	undo.Push(func() { _ = pod.DeleteRule(r) })
	return nil
}

// sbrHasRule reports whether a rule from src looks up table (any table
// when table is 0).
func sbrHasRule(pod *netops.Handle, src netip.Prefix, table int) (bool, error) {
	t, err := sbrRuleTable(pod, src, table)
	return t != 0, err
}

// sbrRuleTable returns the table a rule from src looks up (0: none); with
// table not 0 only a rule to that table counts, otherwise only one to a
// table from sbrFirstTable on.
func sbrRuleTable(pod *netops.Handle, src netip.Prefix, table int) (int, error) {
	rules, err := pod.Rules()
	if err != nil {
		return 0, cniplug.Errorf(types.ErrIOFailure, "sbr: %w", err)
	}
	for _, r := range rules {
		if r.Src != src {
			continue
		}
		if (table != 0 && r.Table == table) || (table == 0 && r.Table >= sbrFirstTable) {
			return r.Table, nil
		}
	}
	return 0, nil
}
