package nft

import (
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// The overlay agent's masquerade lives in a table of its own, its chain
// rewritten (one transaction, core.go) whenever the node's lease changes:
//
//	table inet cnibox-overlay {
//		chain postrouting {
//			type nat hook postrouting priority srcnat; policy accept;
//			ip saddr 10.244.0.0/16 ip daddr 10.244.0.0/16 return   # pod to pod: never
//			ip saddr 10.244.0.0/16 ip daddr 224.0.0.0/4 return     # multicast: never
//			ip saddr 10.244.0.0/16 masquerade fully-random         # pod to outside
//			ip saddr != 10.244.0.0/16 ip daddr 10.244.1.0/24 return           # to local pods: keep
//			ip saddr != 10.244.0.0/16 ip daddr 10.244.0.0/16 masquerade fully-random # node to remote pods
//		}
//	}
//
// These are flannel's rules (its --ip-masq), so pods keep their addresses
// inside the cluster network and leave it behind the node's address.
const (
	// OverlayMasqTable is the name of the inet table of the overlay's masquerade.
	OverlayMasqTable = "cnibox-overlay"
	overlayMasqChain = "postrouting"
)

// OverlayMasqNet is one cluster network and this node's subnet of it.
type OverlayMasqNet struct {
	Network netip.Prefix // the cluster network, e.g. 10.244.0.0/16
	Subnet  netip.Prefix // this node's lease, e.g. 10.244.1.0/24
}

// OverlayMasqOpts are the table's settings beside its networks.
type OverlayMasqOpts struct {
	// NotFullyRandom masquerades without fully-random port allocation
	// (flannel's --ip-masq-fully-random-disable).
	NotFullyRandom bool
}

// EnsureOverlayMasq makes the overlay masquerade table hold the rules for
// nets (one IPv4 and/or one IPv6 network): when the rules there differ (or
// are gone: someone flushed them), the difference is committed in one
// nftables transaction (reconcile); changed reports that. A check that
// finds them in place costs the table's dumps.
func (h *Handle) EnsureOverlayMasq(nets []OverlayMasqNet, o OverlayMasqOpts) (changed bool, err error) {
	for _, n := range nets {
		if !n.Network.IsValid() || !n.Subnet.IsValid() || n.Network.Addr().Is4() != n.Subnet.Addr().Is4() {
			return false, fmt.Errorf("ensure overlay masquerade: invalid network %v / subnet %v", n.Network, n.Subnet)
		}
	}
	changed, err = h.reconcile(overlayMasqTable(nets, o))
	if err != nil {
		return false, fmt.Errorf("ensure overlay masquerade %v in %s: %w", nets, h.where(), classify(err))
	}
	return changed, nil
}

// overlayMasqTable is the table: one chain.
func overlayMasqTable(nets []OverlayMasqNet, o OverlayMasqOpts) *tableSpec {
	return &tableSpec{table: overlayMasqTableObj(), owned: true, what: "overlay masquerade",
		chains: []chainSpec{baseChain(overlayMasqChain, nftables.ChainTypeNAT, *nftables.ChainHookPostrouting,
			*nftables.ChainPriorityNATSource, overlayMasqRules(nets, o))}}
}

func overlayMasqTableObj() *nftables.Table {
	return &nftables.Table{Name: OverlayMasqTable, Family: nftables.TableFamilyINet}
}

// overlayMasqRules are the table's rules (without table and chain).
func overlayMasqRules(nets []OverlayMasqNet, o OverlayMasqOpts) []*nftables.Rule {
	var out []*nftables.Rule
	rule := func(comment string, exprs ...[]expr.Any) { out = append(out, commentedRule(comment, exprs...)) }
	ret := []expr.Any{&expr.Verdict{Kind: expr.VerdictReturn}}
	masq := []expr.Any{&expr.Masq{FullyRandom: !o.NotFullyRandom}}
	for _, n := range nets {
		network, subnet := n.Network.Masked(), n.Subnet.Masked()
		mcast := netip.MustParsePrefix("224.0.0.0/4")
		if network.Addr().Is6() {
			mcast = netip.MustParsePrefix("ff00::/8")
		}
		tag := "cnibox overlay " + network.String()
		rule(tag+": pod to pod", matchPrefix(true, network, false), matchPrefix(false, network, false), ret)
		rule(tag+": pod to multicast", matchPrefix(true, network, false), matchPrefix(false, mcast, false), ret)
		rule(tag+": pod to outside", matchPrefix(true, network, false), masq)
		rule(tag+": to local pods "+subnet.String(), matchPrefix(true, network, true), matchPrefix(false, subnet, false), ret)
		rule(tag+": node to remote pods", matchPrefix(true, network, true), matchPrefix(false, network, false), masq)
	}
	return out
}

// DeleteOverlayMasq removes the overlay masquerade table. A missing table is
// not an error.
func (h *Handle) DeleteOverlayMasq() error { return overlayMasqOne().drop(h) }

// OverlayMasq reports the comments of the overlay masquerade rules, in order
// (nil when the table does not exist), for checks and the CLI.
func (h *Handle) OverlayMasq() ([]string, error) { return overlayMasqOne().comments(h) }

// overlayMasqOne is the table as a oneChain.
func overlayMasqOne() oneChain {
	return oneChain{table: overlayMasqTableObj(), chain: overlayMasqChain, what: "overlay masquerade"}
}
