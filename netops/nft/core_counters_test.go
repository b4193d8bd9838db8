package nft

import (
	"net/netip"
	"os"
	"slices"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/netops/nft/nftfake"
	"github.com/cnibox/cnibox/netops/nstest"
)

// onFakeAndKernel runs f on nftfake's kernel (as any user) and, as root, on
// the kernel in a new namespace; other is another program's connection.
func onFakeAndKernel(t *testing.T, f func(t *testing.T, h *Handle, other *nftables.Conn, fake *nftfake.Kernel)) {
	t.Run("fake", func(t *testing.T) {
		k := nftfake.New()
		h := OpenDial(k.Dial())
		defer h.Close()
		c, err := k.Conn()
		if err != nil {
			t.Fatal(err)
		}
		f(t, h, c, k)
		if err := k.Err(); err != nil {
			t.Errorf("the fake kernel was sent what it does not model: %v", err)
		}
	})
	t.Run("kernel", func(t *testing.T) {
		nstest.RequireRoot(t)
		path := nstest.NewNS(t, "corecnt")
		h, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		ns, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer ns.Close()
		c, err := nftables.New(nftables.WithNetNSFd(int(ns.Fd())))
		if err != nil {
			t.Fatal(err)
		}
		f(t, h, c, nil)
	})
}

// counterSpec is a table whose rules count on named counters and load
// conntrack addresses of both directions (the policy tables' shapes):
// `ct <dir> saddr @s counter name c-<i> accept` for each of counters, a
// limit, and a drop counted on c-drop. dir is the direction of the first
// rule's load.
func counterSpec(dir uint32, counters ...string) *tableSpec {
	var rules []*nftables.Rule
	for i, c := range counters {
		d := uint32(i % 2)
		if i == 0 {
			d = dir
		}
		rules = append(rules, &nftables.Rule{Exprs: []expr.Any{
			ctAddr(d, 1),
			&expr.Lookup{SourceRegister: 1, SetName: "s"},
			&expr.Limit{Type: expr.LimitTypePkts, Rate: 100, Unit: expr.LimitTimeSecond, Burst: 100},
			&expr.Objref{Type: unix.NFT_OBJECT_COUNTER, Name: c},
			verdict(expr.VerdictAccept, ""),
		}})
	}
	rules = append(rules, &nftables.Rule{Exprs: countAnd("c-drop", verdict(expr.VerdictDrop, ""))})
	return &tableSpec{
		table: &nftables.Table{Name: "core-counters", Family: nftables.TableFamilyINet}, owned: true, what: "the counters' test table",
		sets:     []setSpec{{set: &nftables.Set{Name: "s", KeyType: nftables.TypeIPAddr}}},
		chains:   []chainSpec{baseChain("fwd", nftables.ChainTypeFilter, *nftables.ChainHookForward, 0, rules)},
		counters: append(slices.Clone(counters), "c-drop"),
	}
}

// TestReconcileCounters: the core reconciles named counter objects and
// reads back rules that load conntrack addresses. A spec with counters
// is made in one transaction and compares equal after it (on the kernel,
// google/nftables' GetRules could not read these rules back: the
// conntrack direction); a counter keeps its values across reconciles; a
// counter someone added goes; a counter whose rule goes is deleted in
// the transaction that rewrites the chain (after the flush: the kernel
// refuses to delete a counter a rule uses); a rule whose only change is
// the conntrack direction of its load is rewritten (the compare once
// left the direction out: `ct original saddr` and `ct reply saddr`
// compared equal).
func TestReconcileCounters(t *testing.T) {
	onFakeAndKernel(t, func(t *testing.T, h *Handle, c *nftables.Conn, fake *nftfake.Kernel) {
		reconcile := func(step string, s *tableSpec, want bool) {
			t.Helper()
			before := Transactions()
			changed, err := h.reconcile(s)
			if err != nil || changed != want {
				t.Fatalf("%s: reconcile = %t, %v; want %t, nil", step, changed, err, want)
			}
			if n := Transactions() - before; n != map[bool]uint64{false: 0, true: 1}[want] {
				t.Errorf("%s: %d transactions", step, n)
			}
		}
		table := counterSpec(0).table
		counters := func() []string {
			t.Helper()
			objs, err := c.GetObjects(table)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, o := range objs {
				if co, ok := o.(*nftables.CounterObj); ok {
					out = append(out, co.Name)
				}
			}
			slices.Sort(out)
			return out
		}
		reconcile("first", counterSpec(0, "c-a", "c-b"), true)
		reconcile("again", counterSpec(0, "c-a", "c-b"), false)
		if got := counters(); !slices.Equal(got, []string{"c-a", "c-b", "c-drop"}) {
			t.Errorf("counters %q, want [c-a c-b c-drop]", got)
		}
		if fake != nil && !fake.SetCounter(table.Family, table.Name, "c-a", 7, 700) {
			t.Fatal("no counter c-a in the fake")
		}

		c.AddObj(&nftables.CounterObj{Table: table, Name: "c-theirs"})
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
		reconcile("a counter added outside", counterSpec(0, "c-a", "c-b"), true)
		reconcile("a counter added outside, again", counterSpec(0, "c-a", "c-b"), false)

		reconcile("c-b's rule gone", counterSpec(0, "c-a"), true)
		if got := counters(); !slices.Equal(got, []string{"c-a", "c-drop"}) {
			t.Errorf("counters %q, want [c-a c-drop]", got)
		}
		reconcile("the direction of c-a's load changed", counterSpec(1, "c-a"), true)
		reconcile("the direction of c-a's load changed, again", counterSpec(1, "c-a"), false)
		if fake != nil {
			objs, err := c.GetObjects(table)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range objs {
				if co, ok := o.(*nftables.CounterObj); ok && co.Name == "c-a" && co.Packets != 7 {
					t.Errorf("counter c-a has %d packets after the reconciles, want the 7 it had", co.Packets)
				}
			}
		}
		rules, err := h.dumpRules(table, "fwd")
		if err != nil || len(rules["fwd"]) != 2 {
			t.Fatalf("rules of fwd: %d, %v; want 2", len(rules["fwd"]), err)
		}
		if ct, ok := rules["fwd"][0].Exprs[0].(*expr.Ct); !ok || ct.Direction != ctDir(1) {
			t.Errorf("the first rule loads %+v, want the reply's source", rules["fwd"][0].Exprs[0])
		}
	})
}

// planSpec is a table whose second form (next) changes every kind of
// object the first has: elements, a rule that looks up a new set and
// counts on a new counter, a jump to a new chain that jumps to another
// new one, a chain, a set and a counter gone.
func planSpec(next bool) *tableSpec {
	a := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	lookup := func(set, counter string, v expr.Any) *nftables.Rule {
		return &nftables.Rule{Exprs: append(append(loadAddr(true, false), &expr.Lookup{SourceRegister: 1, SetName: set}), countAnd(counter, v)...)}
	}
	jump := func(to string) *nftables.Rule {
		return &nftables.Rule{Exprs: []expr.Any{verdict(expr.VerdictJump, to)}}
	}
	s := &tableSpec{table: &nftables.Table{Name: "core-plan", Family: nftables.TableFamilyINet}, owned: true, what: "the plan's test table"}
	set := func(name string, addrs ...netip.Addr) setSpec {
		return setSpec{set: &nftables.Set{Name: name, KeyType: nftables.TypeIPAddr}, elems: ipv4Elems(addrs)}
	}
	if !next {
		s.sets = []setSpec{set("s1", a("192.0.2.1"), a("192.0.2.2")), set("s-old", a("192.0.2.9"))}
		s.counters = []string{"c1", "c-old"}
		s.chains = []chainSpec{
			baseChain("in", nftables.ChainTypeFilter, *nftables.ChainHookInput, 0, []*nftables.Rule{lookup("s1", "c1", verdict(expr.VerdictJump, "sub1")), jump("old")}),
			{name: "sub1", rules: []*nftables.Rule{lookup("s-old", "c-old", verdict(expr.VerdictReturn, ""))}},
			{name: "old", rules: []*nftables.Rule{{Exprs: []expr.Any{verdict(expr.VerdictDrop, "")}}}},
		}
		return s
	}
	s.sets = []setSpec{set("s1", a("192.0.2.2"), a("192.0.2.3")), set("s2", a("198.51.100.1"))}
	s.counters = []string{"c1", "c2"}
	s.chains = []chainSpec{
		baseChain("in", nftables.ChainTypeFilter, *nftables.ChainHookInput, 0, []*nftables.Rule{lookup("s1", "c1", verdict(expr.VerdictJump, "sub1")), jump("new1")}),
		{name: "sub1", rules: []*nftables.Rule{lookup("s2", "c2", verdict(expr.VerdictReturn, ""))}},
		{name: "new1", rules: []*nftables.Rule{jump("new2")}},
		{name: "new2", rules: []*nftables.Rule{lookup("s2", "c2", verdict(expr.VerdictAccept, ""))}},
	}
	return s
}

// TestPlanChunked: the core's plan committed one step a transaction (as
// the policy table's full sync may cut a large one) is taken by the
// kernel at every step, which checks each reference (a lookup of a set,
// a counter, a jump, a delete of what a rule still uses), and ends in the
// spec's table: a reconcile after it finds nothing to change.
func TestPlanChunked(t *testing.T) {
	onFakeAndKernel(t, func(t *testing.T, h *Handle, _ *nftables.Conn, _ *nftfake.Kernel) {
		if _, err := h.reconcile(planSpec(false)); err != nil {
			t.Fatal(err)
		}
		spec := planSpec(true)
		have, err := h.dumpTable(spec)
		if err != nil {
			t.Fatal(err)
		}
		p := spec.plan(have)
		if n := len(p.chunks(0, 0)); n != 1 {
			t.Errorf("chunks(0, 0) = %d transactions, want 1", n)
		}
		chunks := p.chunks(1, 1)
		if len(chunks) != len(p.steps) || len(chunks) < 10 {
			t.Fatalf("chunks(1, 1) = %d transactions of %d steps, want one a step (10 at least)", len(chunks), len(p.steps))
		}
		for i, c := range chunks {
			tx := h.tx()
			for _, st := range c {
				if err := st.queue(tx); err != nil {
					t.Fatal(err)
				}
			}
			if err := tx.commit(); err != nil {
				t.Fatalf("step %d of %d: %v", i+1, len(chunks), err)
			}
		}
		if changed, err := h.reconcile(planSpec(true)); err != nil || changed {
			t.Errorf("reconcile after the steps = %t, %v; want nothing to change", changed, err)
		}
	})
}
