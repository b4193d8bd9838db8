package nftfake_test

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/netops/nft/nftfake"
	"github.com/cnibox/cnibox/netops/nstest"
)

// step is one batch (or read) sent the same way to both kernels.
type step struct {
	name string
	do   func(c *nftables.Conn) error
}

var (
	tbl   = &nftables.Table{Family: nftables.TableFamilyINet, Name: "diff"}
	tbl2  = &nftables.Table{Family: nftables.TableFamilyIPv4, Name: "diff4"}
	base  = &nftables.Chain{Table: tbl, Name: "fwd", Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter}
	reg   = &nftables.Chain{Table: tbl, Name: "reg"}
	reg2  = &nftables.Chain{Table: tbl, Name: "reg2"}
	addrs = &nftables.Set{Table: tbl, Name: "addrs", KeyType: nftables.TypeIPAddr, ID: 1 << 20}
	tmo   = &nftables.Set{Table: tbl, Name: "tmo", KeyType: nftables.TypeIPAddr, HasTimeout: true, ID: 1<<20 + 1}
	vmap  = &nftables.Set{Table: tbl, Name: "vmap", KeyType: nftables.TypeIPAddr, DataType: nftables.TypeVerdict, IsMap: true, ID: 1<<20 + 2}
	ivl   = &nftables.Set{Table: tbl, Name: "ivl", KeyType: nftables.TypeIPAddr, Interval: true, ID: 1<<20 + 3}
	cnt   = &nftables.CounterObj{Table: tbl, Name: "c1"}
)

func ip(s string) []byte { return []byte(netipMust(s)) }

func netipMust(s string) string {
	var a, b, c, d byte
	fmt.Sscanf(s, "%d.%d.%d.%d", &a, &b, &c, &d)
	return string([]byte{a, b, c, d})
}

func jump(c string) []expr.Any { return []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: c}} }

func lookup(set string) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Lookup{SourceRegister: 1, SetName: set},
		&expr.Counter{},
		&expr.Verdict{Kind: expr.VerdictAccept},
	}
}

// steps are the operations compared, each a batch (or a read) that the
// kernel applies whole or refuses whole.
var steps = []step{
	{"tables and chains", func(c *nftables.Conn) error {
		c.AddTable(tbl)
		c.AddTable(tbl2)
		pol := nftables.ChainPolicyDrop
		b := *base
		b.Policy = &pol
		c.AddChain(&b)
		c.AddChain(reg)
		c.AddChain(reg2)
		return c.Flush()
	}},
	{"sets, maps, counter", func(c *nftables.Conn) error {
		for _, s := range []*nftables.Set{addrs, tmo, vmap, ivl} {
			if err := c.AddSet(s, nil); err != nil {
				return err
			}
		}
		c.AddObj(cnt)
		return c.Flush()
	}},
	{"elements", func(c *nftables.Conn) error {
		must(c.SetAddElements(addrs, []nftables.SetElement{{Key: ip("10.0.0.1")}, {Key: ip("10.0.0.2")}}))
		must(c.SetAddElements(tmo, []nftables.SetElement{{Key: ip("10.0.0.3"), Timeout: time.Hour}, {Key: ip("10.0.0.4")}}))
		must(c.SetAddElements(vmap, []nftables.SetElement{{Key: ip("10.0.0.5"), VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: "reg"}}}))
		must(c.SetAddElements(ivl, []nftables.SetElement{{Key: ip("10.1.0.0")}, {Key: ip("10.2.0.0"), IntervalEnd: true}}))
		return c.Flush()
	}},
	{"rules: append, insert, position", func(c *nftables.Conn) error {
		c.AddRule(&nftables.Rule{Table: tbl, Chain: base, Exprs: jump("reg")})
		c.AddRule(&nftables.Rule{Table: tbl, Chain: base, Exprs: lookup("addrs")})
		c.InsertRule(&nftables.Rule{Table: tbl, Chain: base, Exprs: []expr.Any{&expr.Objref{Type: 1, Name: "c1"}}})
		c.AddRule(&nftables.Rule{Table: tbl, Chain: reg, Exprs: jump("reg2"), UserData: []byte("ud")})
		return c.Flush()
	}},
	{"rule at a position", func(c *nftables.Conn) error {
		rs, err := c.GetRules(tbl, base)
		if err != nil || len(rs) < 2 {
			return fmt.Errorf("rules: %v %d", err, len(rs))
		}
		c.AddRule(&nftables.Rule{Table: tbl, Chain: base, Position: rs[0].Handle, Exprs: jump("reg2")})
		c.InsertRule(&nftables.Rule{Table: tbl, Chain: base, Position: rs[1].Handle, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}}})
		return c.Flush()
	}},
	{"an anonymous set bound to its rule", func(c *nftables.Conn) error {
		anon := &nftables.Set{Table: tbl, Name: "__set%d", KeyType: nftables.TypeIPAddr, Anonymous: true, Constant: true, ID: 1<<20 + 9}
		if err := c.AddSet(anon, []nftables.SetElement{{Key: ip("10.9.0.1")}, {Key: ip("10.9.0.2")}}); err != nil {
			return err
		}
		c.AddRule(&nftables.Rule{Table: tbl, Chain: reg, Exprs: []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Lookup{SourceRegister: 1, SetName: anon.Name, SetID: anon.ID},
			&expr.Verdict{Kind: expr.VerdictDrop},
		}})
		return c.Flush()
	}},
	{"ENOENT: a chain in a missing table", func(c *nftables.Conn) error {
		c.AddChain(&nftables.Chain{Table: tbl, Name: "rolled-back"})
		c.AddChain(&nftables.Chain{Table: &nftables.Table{Family: nftables.TableFamilyINet, Name: "none"}, Name: "x"})
		return c.Flush()
	}},
	{"ENOENT: a jump to a missing chain", func(c *nftables.Conn) error {
		c.AddRule(&nftables.Rule{Table: tbl, Chain: reg2, Exprs: []expr.Any{&expr.Counter{}}})
		c.AddRule(&nftables.Rule{Table: tbl, Chain: reg2, Exprs: jump("missing")})
		return c.Flush()
	}},
	{"ENOENT: a lookup in a missing set", func(c *nftables.Conn) error {
		c.AddRule(&nftables.Rule{Table: tbl, Chain: reg2, Exprs: lookup("missing")})
		return c.Flush()
	}},
	{"EEXIST: a table with NLM_F_EXCL", func(c *nftables.Conn) error {
		c.CreateTable(tbl)
		return c.Flush()
	}},
	{"EBUSY: a chain jumped to", func(c *nftables.Conn) error {
		c.DelChain(reg2)
		return c.Flush()
	}},
	{"EBUSY: a set a rule uses", func(c *nftables.Conn) error {
		c.DelSet(addrs)
		return c.Flush()
	}},
	{"EBUSY: a counter a rule uses", func(c *nftables.Conn) error {
		c.DeleteObject(cnt)
		return c.Flush()
	}},
	{"ENOENT: deleting a missing element", func(c *nftables.Conn) error {
		must(c.SetAddElements(addrs, []nftables.SetElement{{Key: ip("10.0.0.9")}}))
		must(c.SetDeleteElements(addrs, []nftables.SetElement{{Key: ip("10.0.0.8")}}))
		return c.Flush()
	}},
	{"EEXIST: an element with other data", func(c *nftables.Conn) error {
		must(c.SetAddElements(vmap, []nftables.SetElement{{Key: ip("10.0.0.5"), VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: "reg2"}}}))
		return c.Flush()
	}},
	{"an existing element again, no EXCL", func(c *nftables.Conn) error {
		must(c.SetAddElements(addrs, []nftables.SetElement{{Key: ip("10.0.0.1")}}))
		return c.Flush()
	}},
	{"EINVAL: a key of the wrong length", func(c *nftables.Conn) error {
		must(c.SetAddElements(addrs, []nftables.SetElement{{Key: []byte{1, 2, 3}}}))
		return c.Flush()
	}},
	{"delete elements, flush a set", func(c *nftables.Conn) error {
		must(c.SetDeleteElements(addrs, []nftables.SetElement{{Key: ip("10.0.0.2")}}))
		c.FlushSet(tmo)
		return c.Flush()
	}},
	{"flush a chain, then delete what it used", func(c *nftables.Conn) error {
		c.FlushChain(base)
		c.DelChain(reg2) // reg still jumps to reg2
		return c.Flush()
	}},
	{"flush chains, delete chain, set, counter", func(c *nftables.Conn) error {
		c.FlushChain(base)
		c.FlushChain(reg)
		c.DelChain(reg2)
		c.DelSet(addrs)
		c.DeleteObject(cnt)
		return c.Flush()
	}},
	{"single gets, counter reset", func(c *nftables.Conn) error {
		if _, err := c.GetSetByName(tbl, "vmap"); err != nil {
			return err
		}
		_, err := c.GetSetByName(tbl, "addrs")
		return err
	}},
	{"delete a missing table", func(c *nftables.Conn) error {
		c.DelTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: "none"})
		return c.Flush()
	}},
	{"delete a table", func(c *nftables.Conn) error {
		c.DelTable(tbl2)
		return c.Flush()
	}},
}

// wantErr is what the kernel says to each step.
var wantErr = func() map[string]string {
	m := map[string]string{}
	for _, s := range steps {
		m[s.name] = "ok"
		for _, n := range []unix.Errno{unix.ENOENT, unix.EEXIST, unix.EBUSY, unix.EINVAL} {
			if strings.HasPrefix(s.name, unixName(n)+":") {
				m[s.name] = n.Error()
			}
		}
	}
	m["flush a chain, then delete what it used"] = unix.EBUSY.Error() // reg still jumps to reg2
	m["single gets, counter reset"] = unix.ENOENT.Error()             // addrs is gone
	m["delete a missing table"] = unix.ENOENT.Error()
	return m
}()

func unixName(n unix.Errno) string {
	return map[unix.Errno]string{unix.ENOENT: "ENOENT", unix.EEXIST: "EEXIST", unix.EBUSY: "EBUSY", unix.EINVAL: "EINVAL"}[n]
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// errText is what the test compares of an error: its errno.
func errText(err error) string {
	if err == nil {
		return "ok"
	}
	for _, n := range []unix.Errno{unix.ENOENT, unix.EEXIST, unix.EBUSY, unix.EINVAL, unix.EOPNOTSUPP} {
		if errors.Is(err, n) {
			return n.Error()
		}
	}
	return "other: " + err.Error()
}

// dump lists what google/nftables reads back from c, normalized.
func dump(t *testing.T, c *nftables.Conn) string {
	var b strings.Builder
	tables, err := c.ListTables()
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(tables, func(a, b *nftables.Table) int { return strings.Compare(a.Name, b.Name) })
	for _, tb := range tables {
		fmt.Fprintf(&b, "table %d %s flags %d use %d\n", tb.Family, tb.Name, tb.Flags, tb.Use)
		chains, err := c.ListChainsOfTableFamily(tb.Family)
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range chains {
			if ch.Table.Name != tb.Name {
				continue
			}
			fmt.Fprintf(&b, " chain %s type %q hook %v prio %v policy %v\n", ch.Name, ch.Type, deref(ch.Hooknum), deref(ch.Priority), deref(ch.Policy))
			rules, err := c.GetRules(tb, ch)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rules {
				fmt.Fprintf(&b, "  rule %d pos %d ud %q", r.Handle, r.Position, r.UserData)
				for _, e := range r.Exprs {
					fmt.Fprintf(&b, " %T%+v", e, e)
				}
				b.WriteString("\n")
			}
		}
		sets, err := c.GetSets(tb)
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(sets, func(a, b *nftables.Set) int { return strings.Compare(a.Name, b.Name) })
		for _, s := range sets {
			fmt.Fprintf(&b, " set %s map %v interval %v timeout %v/%v const %v key %v data %v concat %v\n", s.Name,
				s.IsMap, s.Interval, s.HasTimeout, s.Timeout, s.Constant, s.KeyType.Name, s.DataType.Name, s.Concatenation)
			elems, err := c.GetSetElements(s)
			if err != nil {
				t.Fatal(err)
			}
			var es []string
			for _, e := range elems {
				v := ""
				if e.VerdictData != nil {
					v = fmt.Sprintf("%+v", *e.VerdictData)
				}
				es = append(es, fmt.Sprintf("  elem %x end %v val %x verdict %s timeout %v expiring %v", e.Key, e.IntervalEnd, e.Val, v, e.Timeout, e.Expires > 0))
			}
			slices.Sort(es)
			for _, e := range es {
				b.WriteString(e + "\n")
			}
		}
		objs, err := c.GetObjects(tb)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			co := o.(*nftables.CounterObj)
			fmt.Fprintf(&b, " counter %s packets %d bytes %d\n", co.Name, co.Packets, co.Bytes)
		}
	}
	return strings.ReplaceAll(b.String(), fmt.Sprintf("%p", tbl), "")
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestDifferential sends the same steps, failures included, through
// google/nftables to the kernel (in a namespace of the test's) and to the
// fake, and compares each step's error and, after each, everything
// google/nftables reads back: tables, chains, rules with their handles,
// positions and expressions, sets, elements, counters.
func TestDifferential(t *testing.T) {
	ns := nstest.NewNS(t, "nftd")
	f, err := os.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	kc, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	k := nftfake.New()
	fc, err := k.Conn()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range steps {
		ke, fe := errText(s.do(kc)), errText(s.do(fc))
		if want := wantErr[s.name]; ke != want {
			t.Errorf("%s: the kernel says %s, the test expects %s: the step tests something else", s.name, ke, want)
		}
		if ke != fe {
			t.Errorf("%s: the kernel says %s, the fake %s", s.name, ke, fe)
		}
		kd, fd := dump(t, kc), dump(t, fc)
		if kd != fd {
			t.Errorf("after %s (%s):\nkernel:\n%s\nfake:\n%s\nfake's text:\n%s", s.name, ke, kd, fd, k)
		}
	}
	if err := k.Err(); err != nil {
		t.Error(err)
	}
}
