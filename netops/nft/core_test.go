package nft

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
)

// coreSpec is a table of every kind of object the core reconciles: a set
// of its own elements, a kept map, a base chain and a regular chain; extra
// is one more address in the set, bad a rule that looks up a set that is
// not there.
func coreSpec(prio nftables.ChainPriority, extra, bad bool) *tableSpec {
	rule := func(comment string, exprs ...expr.Any) *nftables.Rule {
		return &nftables.Rule{Exprs: exprs, UserData: userdata.AppendString(nil, userdata.TypeComment, comment)}
	}
	lookup := func(set string) []expr.Any {
		return append(loadAddr(true, false), &expr.Lookup{SourceRegister: 1, SetName: set})
	}
	addrs := []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")}
	if extra {
		addrs = append(addrs, netip.MustParseAddr("192.0.2.3"))
	}
	in := []*nftables.Rule{
		rule("from @s: accept", append(lookup("s"), &expr.Counter{}, &expr.Verdict{Kind: expr.VerdictAccept})...),
		rule("to sub", &expr.Verdict{Kind: expr.VerdictJump, Chain: "sub"}),
	}
	if bad {
		in = append(in, rule("from @nosuch", append(lookup("nosuch"), &expr.Verdict{Kind: expr.VerdictDrop})...))
	}
	return &tableSpec{
		table: &nftables.Table{Name: "core-test", Family: nftables.TableFamilyINet}, owned: true, what: "the core's test table",
		sets: []setSpec{
			{set: &nftables.Set{Name: "s", KeyType: nftables.TypeIPAddr}, elems: ipv4Elems(addrs)},
			{set: &nftables.Set{Name: "m", IsMap: true, KeyType: nftables.TypeIPAddr, DataType: nftables.TypeEtherAddr}, kept: true},
		},
		chains: []chainSpec{
			baseChain("in", nftables.ChainTypeFilter, *nftables.ChainHookInput, prio, in),
			{name: "sub", rules: []*nftables.Rule{rule("sub: return", &expr.Verdict{Kind: expr.VerdictReturn})}},
		},
	}
}

// TestReconcile: a spec reconciled twice sends one transaction, then none;
// each tampering (a rule deleted, a chain added by someone, an element
// removed or added, the table deleted) is repaired by one transaction, the
// kept map's elements staying; a failing transaction leaves the table as
// it was.
func TestReconcile(t *testing.T) {
	h, err := Open(nstest.NewNS(t, "core"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	spec := func() *tableSpec { return coreSpec(0, false, false) }
	reconcile := func(step string, s *tableSpec, wantChanged bool, wantTx uint64) {
		t.Helper()
		before := Transactions()
		changed, err := h.reconcile(s)
		if err != nil || changed != wantChanged {
			t.Fatalf("%s: reconcile = %t, %v; want %t, nil", step, changed, err, wantChanged)
		}
		if n := Transactions() - before; n != wantTx {
			t.Errorf("%s: %d transactions, want %d", step, n, wantTx)
		}
	}
	table := spec().table
	// Someone else: a connection of its own.
	c, err := nftables.New(nftables.WithNetNSFd(h.nsFD))
	if err != nil {
		t.Fatal(err)
	}
	// check reads the table back: its chains, the rules' comments, the
	// set's elements and the kept map's.
	check := func(step string, wantElems int) {
		t.Helper()
		chains, err := c.ListChainsOfTableFamily(table.Family)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, ch := range chains {
			if ch.Table.Name == table.Name {
				names = append(names, ch.Name)
			}
		}
		slices.Sort(names)
		if !slices.Equal(names, []string{"in", "sub"}) {
			t.Errorf("%s: chains %q, want [in sub]", step, names)
		}
		comments, err := h.chainComments(table, "in")
		if err != nil || !slices.Equal(comments, []string{"from @s: accept", "to sub"}) {
			t.Errorf("%s: chain in has %q, %v; want its two rules", step, comments, err)
		}
		elems, err := h.dumpFamilyElems(table.Family, table.Name, "s")
		if err != nil || len(elems) != wantElems {
			t.Errorf("%s: set s has %d elements, %v; want %d", step, len(elems), err, wantElems)
		}
		kept, err := h.dumpFamilyElems(table.Family, table.Name, "m")
		if err != nil || len(kept) != 1 {
			t.Errorf("%s: the kept map has %d elements, %v; want its one", step, len(kept), err)
		}
	}
	outside := func(f func()) {
		t.Helper()
		f()
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	set := &nftables.Set{Name: "s", Table: table, KeyType: nftables.TypeIPAddr}
	kept := &nftables.Set{Name: "m", Table: table, IsMap: true, KeyType: nftables.TypeIPAddr, DataType: nftables.TypeEtherAddr}

	reconcile("first", spec(), true, 1)
	outside(func() {
		_ = c.SetAddElements(kept, []nftables.SetElement{{Key: []byte{10, 0, 0, 1}, Val: []byte{2, 0, 0, 0, 0, 1}}})
	})
	reconcile("second", spec(), false, 0)
	check("second", 2)

	tamper := map[string]func(){
		"a rule deleted": func() {
			rules, err := c.GetRules(table, &nftables.Chain{Name: "in", Table: table})
			if err != nil || len(rules) != 2 {
				t.Fatalf("rules of in: %d, %v", len(rules), err)
			}
			_ = c.DelRule(rules[0])
		},
		"a chain added": func() {
			ch := c.AddChain(&nftables.Chain{Name: "intruder", Table: table})
			c.AddRule(&nftables.Rule{Table: table, Chain: ch, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}}})
		},
		"an element removed": func() {
			_ = c.SetDeleteElements(set, ipv4Elems([]netip.Addr{netip.MustParseAddr("192.0.2.1")}))
		},
		"an element added": func() {
			_ = c.SetAddElements(set, ipv4Elems([]netip.Addr{netip.MustParseAddr("198.51.100.7")}))
		},
		"a chain's rules replaced": func() {
			ch := &nftables.Chain{Name: "sub", Table: table}
			c.FlushChain(ch)
			c.AddRule(&nftables.Rule{Table: table, Chain: ch, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}},
				UserData: userdata.AppendString(nil, userdata.TypeComment, "sub: return")})
		},
	}
	for _, name := range sortedKeys(tamper) {
		outside(tamper[name])
		reconcile("after "+name, spec(), true, 1)
		reconcile("after "+name+", again", spec(), false, 0)
		check("after "+name, 2)
	}

	reconcile("another priority", coreSpec(10, false, false), true, 1)
	ch, err := c.ListChain(table, "in")
	if err != nil || ch.Priority == nil || *ch.Priority != 10 {
		t.Errorf("chain in after a change of priority: %+v, %v; want priority 10", ch, err)
	}
	check("another priority", 2)

	// A failure rolls back: the rule deleted outside stays deleted and
	// the new element is not added.
	outside(tamper["a rule deleted"])
	if changed, err := h.reconcile(coreSpec(10, true, true)); err == nil || changed {
		t.Fatalf("reconcile of a rule that looks up a missing set = %t, %v; want an error", changed, err)
	}
	if comments, _ := h.chainComments(table, "in"); len(comments) != 1 {
		t.Errorf("after the failed reconcile chain in has %q; want the one rule left outside", comments)
	}
	if elems, _ := h.dumpFamilyElems(table.Family, table.Name, "s"); len(elems) != 2 {
		t.Errorf("after the failed reconcile set s has %d elements, want 2 (nothing of the transaction)", len(elems))
	}
	reconcile("after the failure", coreSpec(10, true, false), true, 1)
	check("after the failure", 3)

	// The table deleted: made again whole, the kept map empty.
	if err := h.deleteTable(table); err != nil {
		t.Fatal(err)
	}
	reconcile("after the table's delete", spec(), true, 1)
	if kept, _ := h.dumpFamilyElems(table.Family, table.Name, "m"); len(kept) != 0 {
		t.Errorf("a table made again has %d elements in its kept map, want none", len(kept))
	}

	// remove: the spec's chains and sets go, in one transaction; then
	// none.
	for i, wantTx := range []uint64{1, 0} {
		before := Transactions()
		if err := h.remove(spec()); err != nil {
			t.Fatalf("remove %d: %v", i, err)
		}
		if n := Transactions() - before; n != wantTx {
			t.Errorf("remove %d: %d transactions, want %d", i, n, wantTx)
		}
	}
	if chains, _ := c.ListChainsOfTableFamily(table.Family); slices.ContainsFunc(chains, func(ch *nftables.Chain) bool { return ch.Table.Name == table.Name }) {
		t.Error("after remove the table still has chains")
	}
	if sets, err := c.GetSets(table); err != nil || len(sets) != 0 {
		t.Errorf("after remove the table has %d sets, %v; want none", len(sets), err)
	}
}

// TestTableSpecsIdempotent: every table's spec, reconciled in a namespace
// without it, is made in one transaction, and reconciled again sends
// none: what the kernel lists back compares equal to what was rendered
// (an expression google/nftables lists otherwise would rewrite the table
// at every check).
func TestTableSpecsIdempotent(t *testing.T) {
	mac := []byte{2, 0, 0, 0, 0, 1}
	p := func(s string) netip.Prefix { return netip.MustParsePrefix(s) }
	a := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	masq := masqTable(nil, nil)
	masq.chains = append(masq.chains, masqSubnetChain(MasqChain("n", p("10.1.0.0/24")), p("10.1.0.0/24")),
		masqSubnetChain(MasqChain("n", p("fd00:1::/64")), p("fd00:1::/64")))
	specs := map[string]func() *tableSpec{
		"egress": func() *tableSpec {
			return egressTable{EgressSpec{Cluster: []netip.Prefix{p("10.244.0.0/16")}, Uplink: "eth0", Rules: []EgressRule{
				{Name: "a", EgressIP: a("192.0.2.10"), Held: true, Sources: []netip.Addr{a("10.244.1.5")}},
				{Name: "b", EgressIP: a("192.0.2.11"), Sources: []netip.Addr{a("10.244.1.6")}, Via: a("10.244.2.0"),
					Destinations: []netip.Prefix{p("198.51.100.0/24")}},
			}}}.spec()
		},
		"overlay masquerade": func() *tableSpec {
			return overlayMasqTable([]OverlayMasqNet{{p("10.244.0.0/16"), p("10.244.1.0/24")}, {p("fd00:244::/56"), p("fd00:244:0:1::/64")}}, OverlayMasqOpts{})
		},
		"fast path": func() *tableSpec {
			return fastPathTable{FastPathSpec{Devices: []string{"lo"}, After: DefaultFastPathAfter}}.spec()
		},
		"dns":                  func() *tableSpec { return dnsTable(DNSRedirect{Port4: 1053, Port6: 1053, Mark: DNSMark}) },
		"fabric":               fabricTable,
		"via-host":             viaHostTable,
		"source check, bridge": func() *tableSpec { return srcTableSpec(srcTable{nftables.TableFamilyBridge, true}) },
		"source check, inet":   func() *tableSpec { return srcTableSpec(srcTable{nftables.TableFamilyINet, true}) },
		"source check, arp":    func() *tableSpec { return srcTableSpec(srcTable{nftables.TableFamilyARP, false}) },
		"macspoof": func() *tableSpec {
			s := macSpoofPort("veth0", mac)
			s.chains = append(s.chains, macSpoofBase())
			return s
		},
		"masquerade":      func() *tableSpec { return masq },
		"firewall":        func() *tableSpec { return fwOwnTable(fwModes{}, "CNI-ADMIN") },
		"firewall, marks": func() *tableSpec { return fwOwnTable(fwModes{true, true}, "CNI-ADMIN") },
	}
	for _, name := range sortedKeys(specs) {
		t.Run(name, func(t *testing.T) {
			h, err := Open(nstest.NewNS(t, "spec"))
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			if _, err := h.nftConn(); err != nil {
				t.Fatal(err)
			}
			if name == "fast path" && !h.hasFlowtables() {
				t.Skip("this kernel has no nftables flowtables")
			}
			if strings.HasPrefix(name, "firewall") { // its maps are raw messages
				if err := h.commitRaw(fwTableMsgs()...); err != nil {
					t.Fatal(err)
				}
			}
			if changed, err := h.reconcile(specs[name]()); err != nil || !changed {
				t.Fatalf("first reconcile = %t, %v; want a change", changed, err)
			}
			spec := specs[name]()
			for i := range spec.sets {
				if spec.sets[i].kept {
					spec.sets[i].elems = nil // a kept set's elements are always sent
				}
			}
			before := Transactions()
			if changed, err := h.reconcile(spec); err != nil || changed || Transactions() != before {
				t.Errorf("second reconcile = %t, %v, %d transactions; want no change and none", changed, err, Transactions()-before)
			}
		})
	}
}

// TestReconcileShared: in a table the spec does not own, what others put
// there stays: their chain, their rule in a chain the spec shares
// (appendOnly: its rule appended once, after theirs), their elements in a
// kept set.
func TestReconcileShared(t *testing.T) {
	h, err := Open(nstest.NewNS(t, "coreshared"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	c, err := nftables.New(nftables.WithNetNSFd(h.nsFD))
	if err != nil {
		t.Fatal(err)
	}
	table := &nftables.Table{Name: "shared", Family: nftables.TableFamilyIPv4}
	comment := func(s string) []byte { return userdata.AppendString(nil, userdata.TypeComment, s) }
	c.AddTable(table)
	fwd := c.AddChain(&nftables.Chain{Name: "FORWARD", Table: table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter})
	c.AddRule(&nftables.Rule{Table: table, Chain: fwd, UserData: comment("theirs"), Exprs: []expr.Any{&expr.Counter{}}})
	c.AddChain(&nftables.Chain{Name: "their-chain", Table: table})
	kept := &nftables.Set{Table: table, Name: "k", KeyType: nftables.TypeIPAddr}
	if err := c.AddSet(kept, ipv4Elems([]netip.Addr{netip.MustParseAddr("192.0.2.9")})); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	spec := func() *tableSpec {
		return &tableSpec{table: table, what: "the shared test table",
			sets: []setSpec{{set: &nftables.Set{Name: "k", KeyType: nftables.TypeIPAddr}, kept: true}},
			chains: []chainSpec{
				{name: "FORWARD", appendOnly: true, rules: []*nftables.Rule{{UserData: comment("ours"),
					Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: "mine"}}}}},
				{name: "mine", rules: []*nftables.Rule{{UserData: comment("mine: return"), Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictReturn}}}}},
			}}
	}
	for i, want := range []bool{true, false} {
		if changed, err := h.reconcile(spec()); err != nil || changed != want {
			t.Fatalf("reconcile %d = %t, %v; want %t", i, changed, err, want)
		}
	}
	if got, _ := h.chainComments(table, "FORWARD"); !slices.Equal(got, []string{"theirs", "ours"}) {
		t.Errorf("FORWARD has %q, want [theirs ours]", got)
	}
	if ok, _ := h.nftChainExists(unix.NFPROTO_IPV4, table.Name, "their-chain"); !ok {
		t.Error("their chain is gone")
	}
	if elems, _ := h.dumpFamilyElems(table.Family, table.Name, "k"); len(elems) != 1 {
		t.Errorf("the kept set has %d elements, want their one", len(elems))
	}
}
