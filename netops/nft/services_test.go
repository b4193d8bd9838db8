package nft

import (
	"bytes"
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/nftables"
	mdnetlink "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/internal/svcmodel"
	"github.com/cnibox/cnibox/netops/nft/nftfake"
)

// manySnap is n ClusterIP+NodePort Services of eps endpoints each.
func manySnap(n, eps int) *svcmodel.Snapshot {
	snap := &svcmodel.Snapshot{
		NodePortAddrs: []netip.Addr{netip.MustParseAddr("192.0.2.10")},
		ClusterCIDRs:  []netip.Prefix{netip.MustParsePrefix("10.64.0.0/10")},
	}
	for i := range n {
		sp := svcmodel.ServicePort{Name: svcName("ns", fmt.Sprintf("svc-%d", i), ""), Family: svcmodel.IPv4, Protocol: svcmodel.TCP,
			Frontends: []svcmodel.Frontend{
				svcFE(svcmodel.ClusterIP, fmt.Sprintf("10.96.%d.%d", i/250, 1+i%250), 80, svcmodel.IPv4),
				svcFE(svcmodel.NodePort, "", uint16(30000+i%2768), svcmodel.IPv4),
			},
			HasEndpoints: true}
		if i >= 2768 {
			sp.Frontends = sp.Frontends[:1]
		}
		for j := range eps {
			sp.ClusterEndpoints = append(sp.ClusterEndpoints, svcEP(fmt.Sprintf("10.%d.%d.%d", 64+j, i/250, 1+i%250), 8080))
		}
		snap.Ports = append(snap.Ports, sp)
	}
	return snap
}

// recorder notes the names each write message to a fake kernel carries.
type recorder struct {
	mu    sync.Mutex
	names [][]string
	elems int
}

func (r *recorder) dial(k *nftfake.Kernel) func([]mdnetlink.Message) ([]mdnetlink.Message, error) {
	d := k.Dial()
	return func(req []mdnetlink.Message) ([]mdnetlink.Message, error) {
		r.mu.Lock()
		for _, m := range req {
			typ := uint16(m.Header.Type) & 0xff
			if uint16(m.Header.Type)>>8 != unix.NFNL_SUBSYS_NFTABLES || typ == unix.NFT_MSG_GETTABLE || typ == unix.NFT_MSG_GETCHAIN ||
				typ == unix.NFT_MSG_GETRULE || typ == unix.NFT_MSG_GETSET || typ == unix.NFT_MSG_GETSETELEM || typ == unix.NFT_MSG_GETGEN {
				continue
			}
			r.names = append(r.names, cstrings(m.Data))
			if typ == unix.NFT_MSG_NEWSETELEM || typ == unix.NFT_MSG_DELSETELEM {
				r.elems += strings.Count(string(m.Data), "\x00\x00") // rough; only compared
			}
		}
		r.mu.Unlock()
		return d(req)
	}
}

// cstrings are the NUL-ended names in b (table, chain and set names).
func cstrings(b []byte) []string {
	var out []string
	for _, f := range strings.Split(string(b), "\x00") {
		if i := strings.LastIndexFunc(f, func(r rune) bool { return r < 0x20 || r > 0x7e }); i >= 0 {
			f = f[i+1:]
		}
		if len(f) >= 3 {
			out = append(out, f)
		}
	}
	return out
}

// TestServicesApplyIncremental: a change of one Service of 300 sends that
// Service's objects only, in one transaction, and the table then traces
// as the new snapshot says.
func TestServicesApplyIncremental(t *testing.T) {
	k := nftfake.New()
	rec := &recorder{}
	h := OpenDial(rec.dial(k))
	t.Cleanup(func() { h.Close() })
	s := NewServices(h, ServicesOptions{})
	snap := manySnap(300, 3)
	if err := s.Apply(snap); err != nil {
		t.Fatal(err)
	}
	changes := []struct {
		what   string
		change func(*svcmodel.Snapshot)
		id     string // the Service's objects
	}{
		{"an endpoint leaves", func(s *svcmodel.Snapshot) { s.Ports[7].ClusterEndpoints = s.Ports[7].ClusterEndpoints[1:] }, "svc-7"},
		{"an endpoint comes", func(s *svcmodel.Snapshot) {
			s.Ports[8].ClusterEndpoints = append(s.Ports[8].ClusterEndpoints, svcEP("10.99.0.8", 8080))
		}, "svc-8"},
		{"a Service goes", func(s *svcmodel.Snapshot) { s.Ports = slices.Delete(s.Ports, 9, 10) }, "svc-9"},
		{"no endpoints left", func(s *svcmodel.Snapshot) { s.Ports[10].ClusterEndpoints, s.Ports[10].HasEndpoints = nil, false }, "svc-10"},
		// (its own shard's table only: the kernel validates that one)
		{"a Service comes", func(s *svcmodel.Snapshot) { s.Ports = append(s.Ports, manySnap(301, 3).Ports[300]) }, "svc-300"},
	}
	for _, c := range changes {
		t.Run(c.what, func(t *testing.T) {
			next := manySnap(300, 3)
			c.change(next)
			sp := &snap.Ports[0]
			for _, ports := range [][]svcmodel.ServicePort{snap.Ports, next.Ports} {
				for i := range ports {
					if ports[i].Name.Name == c.id {
						sp = &ports[i]
					}
				}
			}
			id := spID(sp)
			rec.mu.Lock()
			rec.names, rec.elems = nil, 0
			rec.mu.Unlock()
			before := k.Batches()
			if err := s.Apply(next); err != nil {
				t.Fatal(err)
			}
			if got := k.Batches() - before; got != 1 {
				t.Errorf("%d transactions, want 1", got)
			}
			if s.st == nil {
				t.Fatal("Apply resynced")
			}
			for _, names := range rec.names {
				for _, n := range names {
					switch {
					case n == ServicesTable, n == ServicesShardOf("ns", c.id), n == ServiceIPs4, n == ServiceNodePorts, n == svcHairpin4, n == svcClusterCIDRs4, n == svcClusterIPs4, strings.HasPrefix(n, svcSlots4), len(n) < 6,
						strings.HasPrefix(n, "np-"), strings.Contains(n, id), strings.Contains(n, "/"+c.id+":"),
						slices.Contains([]string{"payload", "lookup", "meta", "bitwise", "hash", "nat", "immediate", "cmp", "reject"}, n):
					default:
						t.Errorf("a message names %q: not %s's", n, c.id)
					}
				}
			}
			if len(rec.names) > 14 { // (a Service created: its chains, rules and elements, 13)
				t.Errorf("%d messages for one Service's change, want a few: %q", len(rec.names), rec.names)
			}
			c2, err := k.Conn()
			if err != nil {
				t.Fatal(err)
			}
			one := *next
			one.Ports = slices.DeleteFunc(slices.Clone(next.Ports), func(sp svcmodel.ServicePort) bool { return sp.Name.Name != c.id })
			checkSvcTrace(t, dumpSvc(t, h, c2), &one)
			if len(one.Ports) == 0 { // gone: its ClusterIP leads nowhere
				p := svcPkt{src: netip.MustParseAddr("10.64.0.9"), dst: sp.Frontends[0].Addr, sport: 1, dport: 80, proto: unix.IPPROTO_TCP}
				if r := dumpSvc(t, h, c2).trace(p, nil); r.verdict != "accept" {
					t.Errorf("the deleted Service's ClusterIP: %v, want accept (no rule)", r)
				}
			}
			// Back to the first snapshot for the next case.
			if err := s.Apply(manySnap(300, 3)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestServicesResync: Resync repairs a deleted frontend element, a
// flushed chain and a deleted slot element, and sends nothing when the
// table is as the snapshot says.
func TestServicesResync(t *testing.T) {
	onKernels(t, "svcrs", func(t *testing.T, h *Handle) {
		s := NewServices(h, ServicesOptions{})
		snap := traceSnap()
		if err := s.Apply(snap); err != nil {
			t.Fatal(err)
		}
		c, err := h.nftConn()
		if err != nil {
			t.Fatal(err)
		}
		want := dumpSvc(t, h, c)
		n := Transactions()
		if err := s.Resync(snap); err != nil {
			t.Fatal(err)
		}
		if got := Transactions() - n; got != 0 {
			t.Errorf("Resync of an unchanged table sent %d transactions, want 0", got)
		}
		sp := &snap.Ports[0]
		id := spID(sp)
		tb := shardTableOf(spKey(sp))
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		must(c.SetDeleteElements(&nftables.Set{Table: tb, Name: ServiceIPs4}, []nftables.SetElement{{Key: frontElem(sp.Frontends[0].Addr, unix.IPPROTO_TCP, 80)}}))
		c.FlushChain(&nftables.Chain{Table: tb, Name: "ext-" + id})
		must(c.SetDeleteElements(&nftables.Set{Table: tb, Name: slotMapName(fam4, slotShard(sp))}, []nftables.SetElement{{Key: append(slotTableID(sp, "c"), 0, 0, 0, 0)}}))
		must(c.Flush())
		if got := dumpSvc(t, h, c); sameSvcDump(got, want) {
			t.Fatal("the tampering changed nothing")
		}
		// Apply does not read the kernel: the drift stays until Resync.
		if err := s.Resync(snap); err != nil {
			t.Fatal(err)
		}
		if got := dumpSvc(t, h, c); !sameSvcDump(got, want) {
			t.Error("Resync left the table other than it was")
		}
		must(s.Delete())
		must(s.Delete())
	})
}

// sameSvcDump compares two dumps by rules and elements.
func sameSvcDump(a, b *svcDump) bool {
	if len(a.chains) != len(b.chains) || len(a.elems) != len(b.elems) || len(a.shards) != len(b.shards) {
		return false
	}
	for i := range a.shards {
		if !sameSvcDump(a.shards[i], b.shards[i]) {
			return false
		}
	}
	for name, rules := range a.chains {
		if !slices.EqualFunc(rules, b.chains[name], sameRule) {
			return false
		}
	}
	sorted := func(els []nftables.SetElement) []nftables.SetElement {
		return slices.SortedFunc(slices.Values(els), func(x, y nftables.SetElement) int { return bytes.Compare(x.Key, y.Key) })
	}
	for name, els := range a.elems {
		if !slices.EqualFunc(sorted(els), sorted(b.elems[name]), sameElem) {
			return false
		}
	}
	return true
}

// TestServicesApplyPartial: a snapshot that follows the one applied
// (svcmodel.Snapshot.Partial) is compared in the Services it names only,
// and the table is then as the snapshot says (a Resync finds nothing to
// send); one that does not follow it is compared whole. Each snapshot
// holds its ports in one slice, then in runs of one Service each (the
// watcher's form, svcmodel's snapshot.go).
func TestServicesApplyPartial(t *testing.T) {
	t.Run("flat", func(t *testing.T) { testServicesApplyPartial(t, false) })
	t.Run("runs", func(t *testing.T) { testServicesApplyPartial(t, true) })
}

func testServicesApplyPartial(t *testing.T, runs bool) {
	k := nftfake.New()
	h := OpenDial(k.Dial())
	t.Cleanup(func() { h.Close() })
	s := NewServices(h, ServicesOptions{})
	// mk is manySnap sorted by name, as a watcher's, with change applied
	// to the ServicePort of each name.
	mk := func(change map[string]func(*svcmodel.ServicePort)) *svcmodel.Snapshot {
		snap := sortedSnap(manySnap(300, 3))
		for i := 0; i < len(snap.Ports); i++ {
			if f := change[snap.Ports[i].Name.Name]; f != nil {
				f(&snap.Ports[i])
				if snap.Ports[i].Name.Name == "" {
					snap.Ports = slices.Delete(snap.Ports, i, i+1)
					i--
				}
			}
		}
		if runs {
			for i := 0; i < len(snap.Ports); {
				j := i + 1
				for j < len(snap.Ports) && snap.Ports[j].Name.Name == snap.Ports[i].Name.Name {
					j++
				}
				snap.Parts = append(snap.Parts, snap.Ports[i:j])
				i = j
			}
			snap.Ports = nil
		}
		return snap
	}
	drop := func(sp *svcmodel.ServicePort) { sp.ClusterEndpoints = sp.ClusterEndpoints[1:] }
	gone := func(sp *svcmodel.ServicePort) { sp.Name.Name = "" }
	names := func(ns ...string) (out []svcmodel.ServiceName) {
		for _, n := range ns {
			out = append(out, svcmodel.ServiceName{Namespace: "ns", Name: n})
		}
		return out
	}
	eps := func(name string) int {
		for _, ps := range s.st.ports {
			if ps.sp.Name.Name == name {
				return len(ps.sp.ClusterEndpoints)
			}
		}
		return -1
	}
	snap := mk(nil)
	snap.Seq = 1
	if err := s.Apply(snap); err != nil {
		t.Fatal(err)
	}
	next := mk(map[string]func(*svcmodel.ServicePort){"svc-7": drop, "svc-9": gone})
	next.Seq, next.Partial, next.Changed = 2, true, names("svc-7", "svc-9")
	if err := s.Apply(next); err != nil {
		t.Fatal(err)
	}
	before := k.Batches()
	if err := s.Resync(next); err != nil {
		t.Fatal(err)
	}
	if got := k.Batches() - before; got != 0 {
		t.Errorf("Resync after a partial Apply sent %d transactions, want 0: the Apply left the table other than the snapshot", got)
	}
	if eps("svc-7") != 2 || eps("svc-9") != -1 {
		t.Errorf("after the partial Apply: svc-7 %d endpoints, svc-9 %d; want 2 and none", eps("svc-7"), eps("svc-9"))
	}
	// Only the named Services are compared: svc-8's change is not seen
	// while the snapshot says only svc-7 changed.
	third := mk(map[string]func(*svcmodel.ServicePort){"svc-8": drop, "svc-9": gone})
	third.Seq, third.Partial, third.Changed = 3, true, names("svc-7")
	if err := s.Apply(third); err != nil {
		t.Fatal(err)
	}
	if eps("svc-7") != 3 || eps("svc-8") != 3 {
		t.Errorf("after a partial Apply naming svc-7: svc-7 %d endpoints, svc-8 %d; want 3 (changed back) and 3 (not compared)", eps("svc-7"), eps("svc-8"))
	}
	// Not following the snapshot applied: compared whole.
	third.Seq = 9
	if err := s.Apply(third); err != nil {
		t.Fatal(err)
	}
	if eps("svc-8") != 2 {
		t.Errorf("a snapshot compared whole: svc-8 %d endpoints, want 2", eps("svc-8"))
	}
}

// sortedSnap is snap with its ports sorted by name, as a watcher's.
func sortedSnap(snap *svcmodel.Snapshot) *svcmodel.Snapshot {
	slices.SortStableFunc(snap.Ports, func(a, b svcmodel.ServicePort) int {
		return cmp.Or(cmp.Compare(a.Name.Namespace, b.Name.Namespace), cmp.Compare(a.Name.Name, b.Name.Name), cmp.Compare(a.Name.Port, b.Name.Port))
	})
	return snap
}
