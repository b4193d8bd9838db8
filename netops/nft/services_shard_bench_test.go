package nft

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/netops/nstest"
)

// BenchmarkServicesShardCommit: what splitting the services table buys
// (done since: services_shard.go; docs/benchmarks.md). Beside services tables of 30,000
// Services x 4 endpoints, a small table of its own (its nat hook, a
// frontend verdict map, 100 Services' chains) gets one Service more per
// commit (a chain, a dnat rule, its verdict map element), deleted again
// after: the kernel validates only the tables a commit flags (nftables'
// validate state is per table), so this commit's cost is the small
// table's, not the big one's (BenchmarkServicesNewService: the same
// change in the big table). Root.
//
//	go test -run '^$' -bench ServicesShardCommit -benchtime 30x ./netops/nft
func BenchmarkServicesShardCommit(b *testing.B) {
	h, err := Open(nstest.NewNS(b, "svcb"))
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	if err := NewServices(h, ServicesOptions{}).Apply(sortedSnap(manySnap(30000, 4))); err != nil {
		b.Fatal(err)
	}
	c, err := h.nftConn()
	if err != nil {
		b.Fatal(err)
	}
	t := &nftables.Table{Name: "shard-bench", Family: nftables.TableFamilyINet}
	c.AddTable(t)
	vm := &nftables.Set{Table: t, Name: "ips", IsMap: true, DataType: nftables.TypeVerdict,
		KeyType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)}
	if err := c.AddSet(vm, nil); err != nil {
		b.Fatal(err)
	}
	pre := c.AddChain(&nftables.Chain{Table: t, Name: "prerouting", Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRef(*nftables.ChainPriorityNATDest + 1)})
	c.AddRule(&nftables.Rule{Table: t, Chain: pre, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
		fam4.load(true, regEP), &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: fam4.portReg()}, thPort(true, fam4.portReg()+1),
		&expr.Lookup{SourceRegister: regEP, SetName: vm.Name, IsDestRegSet: true, DestRegister: 0},
	}})
	add := func(i int) error {
		ch := c.AddChain(&nftables.Chain{Table: t, Name: fmt.Sprintf("svc-%d", i)})
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{
			&expr.Immediate{Register: regEP, Data: []byte{10, 64, byte(i >> 8), byte(i)}},
			&expr.Immediate{Register: fam4.portReg(), Data: be16(8080)},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: regEP, RegProtoMin: fam4.portReg(), Specified: true},
		}})
		return c.SetAddElements(vm, []nftables.SetElement{{Key: frontElem(addrPlus4(i), unix.IPPROTO_TCP, 80), VerdictData: gotoChain(ch.Name)}})
	}
	for i := range 100 {
		if err := add(i); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.Flush(); err != nil {
		b.Fatal(err)
	}
	defer func() { c.DelTable(t); _ = c.Flush() }()
	var ms []float64
	for b.Loop() {
		if err := add(100); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if err := c.Flush(); err != nil {
			b.Fatal(err)
		}
		ms = append(ms, float64(time.Since(t0).Microseconds())/1000)
		b.StopTimer()
		_ = c.SetDeleteElements(vm, []nftables.SetElement{{Key: frontElem(addrPlus4(100), unix.IPPROTO_TCP, 80)}})
		c.FlushChain(&nftables.Chain{Table: t, Name: "svc-100"})
		c.DelChain(&nftables.Chain{Table: t, Name: "svc-100"})
		if err := c.Flush(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	slices.Sort(ms)
	b.ReportMetric(ms[len(ms)/2], "p50-ms")
	b.ReportMetric(ms[min(len(ms)-1, len(ms)*99/100)], "p99-ms")
}

// addrPlus4 is 10.200.i>>8.i&255.
func addrPlus4(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 200, byte(i >> 8), byte(i)}) }
