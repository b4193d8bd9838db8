package nft_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"

	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nft"
)

// TestCleanupKubeProxy: a node as kube-proxy leaves it in both its modes
// (tables ip and ip6 kube-proxy; iptables-nft's nat, filter and mangle
// with its chains, its jumps from the base chains, and beside them a
// foreign chain, the kubelet's chains and rules of others): CleanupKubeProxy
// removes exactly what `kube-proxy --cleanup` removes, says what, and a
// second call finds nothing and sends no transaction.
func TestCleanupKubeProxy(t *testing.T) { labtest.OnNFT(t, "kpclean", testCleanupKubeProxy) }

func testCleanupKubeProxy(t *testing.T, k *labtest.NFT) {
	c := connOf(t, k)
	ip4 := nftables.TableFamilyIPv4
	for _, fam := range []nftables.TableFamily{ip4, nftables.TableFamilyIPv6} {
		kp := c.AddTable(&nftables.Table{Family: fam, Name: "kube-proxy"})
		c.AddChain(&nftables.Chain{Table: kp, Name: "services"})
	}
	nat := c.AddTable(&nftables.Table{Family: ip4, Name: "nat"})
	filter := c.AddTable(&nftables.Table{Family: ip4, Name: "filter"})
	mangle6 := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv6, Name: "mangle"})
	base := func(tb *nftables.Table, name string, typ nftables.ChainType, hook *nftables.ChainHook, prio *nftables.ChainPriority) *nftables.Chain {
		return c.AddChain(&nftables.Chain{Table: tb, Name: name, Type: typ, Hooknum: hook, Priority: prio})
	}
	chains := map[string]*nftables.Chain{
		"PREROUTING":  base(nat, "PREROUTING", nftables.ChainTypeNAT, nftables.ChainHookPrerouting, nftables.ChainPriorityNATDest),
		"POSTROUTING": base(nat, "POSTROUTING", nftables.ChainTypeNAT, nftables.ChainHookPostrouting, nftables.ChainPriorityNATSource),
		"INPUT":       base(filter, "INPUT", nftables.ChainTypeFilter, nftables.ChainHookInput, nftables.ChainPriorityFilter),
		"FORWARD":     base(filter, "FORWARD", nftables.ChainTypeFilter, nftables.ChainHookForward, nftables.ChainPriorityFilter),
	}
	for _, n := range []string{"KUBE-SERVICES", "KUBE-SVC-ABC", "KUBE-SEP-XYZ", "KUBE-MARK-MASQ", "KUBE-POSTROUTING", "DOCKER"} {
		chains["nat/"+n] = c.AddChain(&nftables.Chain{Table: nat, Name: n})
	}
	for _, n := range []string{"KUBE-FORWARD", "KUBE-PROXY-FIREWALL", "KUBE-FIREWALL"} {
		chains["filter/"+n] = c.AddChain(&nftables.Chain{Table: filter, Name: n})
	}
	for _, n := range []string{"KUBE-PROXY-CANARY", "KUBE-KUBELET-CANARY"} {
		c.AddChain(&nftables.Chain{Table: mangle6, Name: n})
	}
	jump := func(from *nftables.Chain, to string, comment string) {
		var exprs []expr.Any
		if strings.HasPrefix(to, "KUBE-PROXY-FIREWALL") {
			// iptables' -m conntrack --ctstate NEW, before the jump
			exprs = append(exprs, &expr.Ct{Register: 1, Key: expr.CtKeySTATE},
				&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: []byte{8, 0, 0, 0}, Xor: []byte{0, 0, 0, 0}},
				&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0, 0, 0, 0}})
		}
		exprs = append(exprs, &expr.Verdict{Kind: expr.VerdictJump, Chain: to})
		c.AddRule(&nftables.Rule{Table: from.Table, Chain: from, Exprs: exprs,
			UserData: userdata.AppendString(nil, userdata.TypeComment, comment)})
	}
	jump(chains["PREROUTING"], "KUBE-SERVICES", "kubernetes service portals")
	jump(chains["PREROUTING"], "DOCKER", "")
	jump(chains["nat/KUBE-SERVICES"], "KUBE-SVC-ABC", "default/web cluster IP")
	jump(chains["nat/KUBE-SVC-ABC"], "KUBE-SEP-XYZ", "default/web -> 10.244.1.5:8080")
	jump(chains["nat/KUBE-SEP-XYZ"], "KUBE-MARK-MASQ", "")
	jump(chains["POSTROUTING"], "KUBE-POSTROUTING", "kubernetes postrouting rules")
	c.AddRule(&nftables.Rule{Table: nat, Chain: chains["POSTROUTING"], Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}})
	jump(chains["FORWARD"], "KUBE-FORWARD", "kubernetes forwarding rules")
	jump(chains["INPUT"], "KUBE-FIREWALL", "")
	jump(chains["INPUT"], "KUBE-PROXY-FIREWALL", "kubernetes load balancer firewall")
	must(t, c.Flush())

	got, err := k.CleanupKubeProxy()
	must(t, err)
	var names []string
	for _, l := range got {
		names = append(names, l.String())
	}
	for _, want := range []string{"table ip kube-proxy", "table ip6 kube-proxy", "chain ip nat KUBE-SEP-XYZ", "chain ip nat KUBE-MARK-MASQ",
		"chain ip filter KUBE-PROXY-FIREWALL", "chain ip6 mangle KUBE-PROXY-CANARY"} {
		if !slices.Contains(names, want) {
			t.Errorf("removed %q; want %q among them", names, want)
		}
	}
	if n := len(names); n != 2+5+2+1+4 { // tables, nat chains, filter chains, mangle's, the four jumps of base chains
		t.Errorf("removed %d objects %q, want 14", n, names)
	}

	// What stays: the base chains with the others' rules, the foreign and
	// the kubelet's chains.
	left := map[string][]string{}
	all, err := c.ListChains()
	must(t, err)
	for _, ch := range all {
		if ch.Table.Name == "kube-proxy" {
			t.Errorf("table %v kube-proxy is still there", ch.Table.Family)
		}
		rules, err := c.GetRules(ch.Table, ch)
		must(t, err)
		var to []string
		for _, r := range rules {
			for _, e := range r.Exprs {
				if v, ok := e.(*expr.Verdict); ok {
					to = append(to, map[bool]string{true: v.Chain, false: "verdict"}[v.Chain != ""])
				}
			}
		}
		left[ch.Table.Name+"/"+ch.Name] = to
	}
	want := map[string][]string{
		"nat/PREROUTING": {"DOCKER"}, "nat/POSTROUTING": {"verdict"}, "nat/DOCKER": nil,
		"filter/INPUT": {"KUBE-FIREWALL"}, "filter/FORWARD": nil, "filter/KUBE-FIREWALL": nil, "mangle/KUBE-KUBELET-CANARY": nil,
	}
	if len(left) != len(want) {
		t.Errorf("chains left %v, want %v", left, want)
	}
	for ch, w := range want {
		if g, ok := left[ch]; !ok || !slices.Equal(g, w) {
			t.Errorf("chain %s: there %t, jumps %q; want there with %q", ch, ok, g, w)
		}
	}

	before := nft.Transactions()
	again, err := k.CleanupKubeProxy()
	if err != nil || len(again) != 0 || nft.Transactions() != before {
		t.Errorf("a second cleanup removed %v (%v) in %d transactions; want nothing in none", again, err, nft.Transactions()-before)
	}
}
