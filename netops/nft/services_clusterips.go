package nft

import (
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The services table's check of the Service range (kube-proxy's
// "cluster-ips-check"): the NAT chains DNAT what a Service serves, and a
// new connection that comes out of them still addressed to a ClusterIP
// (a port or protocol none of its Services has) is rejected, one to
// another address of the Service range (unallocated) dropped, so that
// neither is routed out as is (by the node's default route):
//
//	set cluster-ips4 { type ipv4_addr }              # every ClusterIP of the snapshot
//	set service-cidrs4 { type ipv4_addr; flags interval }  # Snapshot.ServiceCIDRs
//	(and the 6 twins)
//	chain filter-forward { type filter hook forward priority filter; ct state new jump cluster-ips-check }
//	chain filter-output { type filter hook output priority filter; ct state new jump cluster-ips-check }
//	chain cluster-ips-check {
//		meta nfproto ipv4 ip daddr @cluster-ips4 meta l4proto tcp reject with tcp reset
//		meta nfproto ipv4 ip daddr @cluster-ips4 reject with icmpx port-unreachable
//		meta nfproto ipv4 ip daddr @service-cidrs4 drop
//		(and the same for ipv6)
//	}
//
// The filter hooks run after the DNAT (forward: prerouting's; output at
// priority filter, after output's dstnat), so a served connection is
// addressed to its endpoint there and passes. cluster-ips4/6 are kept by
// Apply as the hairpin sets are (a count of ServicePorts per address).
const (
	svcClusterIPs4    = "cluster-ips4"
	svcClusterIPs6    = "cluster-ips6"
	svcServiceCIDRs4  = "service-cidrs4"
	svcServiceCIDRs6  = "service-cidrs6"
	svcChainIPsCheck  = "cluster-ips-check"
	svcChainFilterFwd = "filter-forward"
	svcChainFilterOut = "filter-output"
)

// clusterIPsCheck are the filter chains of the Service range's check; c
// makes a rule's comment.
func clusterIPsCheck(c func(string) []byte) []chainSpec {
	jump := func() []*nftables.Rule {
		return []*nftables.Rule{svcRule(c("new connections: the Service range's check"),
			append(ctState(expr.CtStateBitNEW), &expr.Verdict{Kind: expr.VerdictJump, Chain: svcChainIPsCheck})...)}
	}
	var check []*nftables.Rule
	for _, f := range []fam{fam4, fam6} {
		cips, cidrs := svcClusterIPs4, svcServiceCIDRs4
		if f.f == fam6.f {
			cips, cidrs = svcClusterIPs6, svcServiceCIDRs6
		}
		known := append(f.isFamily(), f.load(true, 1), &expr.Lookup{SourceRegister: 1, SetName: cips})
		check = append(check,
			svcRule(c("a ClusterIP's port no Service has: reject (TCP reset)"), append(append([]expr.Any(nil), known...),
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
				&expr.Reject{Type: unix.NFT_REJECT_TCP_RST})...),
			svcRule(c("a ClusterIP's port no Service has: reject (port unreachable)"), append(append([]expr.Any(nil), known...),
				&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_PORT_UNREACH})...),
			svcRule(c("an unallocated address of the Service range: drop"), append(f.isFamily(), f.load(true, 1),
				&expr.Lookup{SourceRegister: 1, SetName: cidrs}, &expr.Verdict{Kind: expr.VerdictDrop})...),
		)
	}
	return []chainSpec{
		baseChain(svcChainFilterFwd, nftables.ChainTypeFilter, *nftables.ChainHookForward, *nftables.ChainPriorityFilter, jump()),
		baseChain(svcChainFilterOut, nftables.ChainTypeFilter, *nftables.ChainHookOutput, *nftables.ChainPriorityFilter, jump()),
		{name: svcChainIPsCheck, rules: check},
	}
}
