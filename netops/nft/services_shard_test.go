package nft

import (
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/internal/svcmodel"
	"github.com/cnibox/cnibox/netops/nft/nftfake"
)

// TestServicesShards: each Service's frontends are elements of its own
// shard's maps (ServicesShardOf) and of no other table's; the Services
// spread over the shards; the main table has no frontend map.
func TestServicesShards(t *testing.T) {
	onKernels(t, "svcsh", func(t *testing.T, h *Handle) {
		s := NewServices(h, ServicesOptions{})
		snap := manySnap(64, 2)
		if err := s.Apply(snap); err != nil {
			t.Fatal(err)
		}
		names, err := h.ServicesTablesIn()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(names, ServicesTables()) || len(names) != 1+svcShards {
			t.Fatalf("tables %v, want %v", names, ServicesTables())
		}
		if ok, _ := h.nftSetExists(uint8(nftables.TableFamilyINet), ServicesTable, ServiceIPs4); ok {
			t.Errorf("the main table has a map %s", ServiceIPs4)
		}
		used := map[string]bool{}
		for _, sp := range snap.Ports {
			want := ServicesShardOf(sp.Name.Namespace, sp.Name.Name)
			used[want] = true
			key := string(frontElem(sp.Frontends[0].Addr, unix.IPPROTO_TCP, sp.Frontends[0].Port))
			for _, table := range names[1:] {
				els, err := h.dumpFamilyElems(nftables.TableFamilyINet, table, ServiceIPs4)
				if err != nil {
					t.Fatal(err)
				}
				in := slices.ContainsFunc(els, func(e nftElem) bool { return string(e.key) == key })
				if in != (table == want) {
					t.Errorf("%s's ClusterIP in %s's %s: %v, want %v", sp.Name, table, ServiceIPs4, in, table == want)
				}
			}
		}
		if len(used) < svcShards/2 {
			t.Errorf("64 Services in %d shards, want them spread", len(used))
		}
		v, err := h.ReadServices()
		if err != nil {
			t.Fatal(err)
		}
		if n, _, _ := h.ServicesFrontendCount(); v == nil || len(v.Frontends) != n || n != len(snap.Ports)+len(snapNodePorts(snap)) {
			t.Errorf("inspect reads %d frontends, the count is %d, want %d", len(v.Frontends), n, len(snap.Ports)+len(snapNodePorts(snap)))
		}
	})
}

func snapNodePorts(snap *svcmodel.Snapshot) []svcmodel.Frontend {
	var out []svcmodel.Frontend
	for _, sp := range snap.Ports {
		for _, fe := range sp.Frontends {
			if fe.Kind == svcmodel.NodePort {
				out = append(out, fe)
			}
		}
	}
	return out
}

// TestServicesShardsAdopt: an agent that finds the one-table layout of
// before the shards (frontend maps and Service chains in the main table)
// and a shard of another count makes the tables hold its snapshot: the
// main table's old objects and the stale shard go; Delete then removes
// every table of the proxy's.
func TestServicesShardsAdopt(t *testing.T) {
	onKernels(t, "svcad", func(t *testing.T, h *Handle) {
		c, err := h.nftConn()
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{ServicesTable, ServicesShardPrefix + "ff"} {
			tb := c.AddTable(&nftables.Table{Name: name, Family: nftables.TableFamilyINet})
			ch := c.AddChain(&nftables.Chain{Name: "svc-old", Table: tb})
			c.AddRule(&nftables.Rule{Table: tb, Chain: ch, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}}})
			m := &nftables.Set{Table: tb, Name: ServiceIPs4, IsMap: true, DataType: nftables.TypeVerdict,
				KeyType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)}
			if err := c.AddSet(m, []nftables.SetElement{{Key: frontElem(addrPlus4(1), unix.IPPROTO_TCP, 80), VerdictData: gotoChain("svc-old")}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
		s := NewServices(h, ServicesOptions{})
		snap := traceSnap()
		if err := s.Apply(snap); err != nil {
			t.Fatal(err)
		}
		names, err := h.ServicesTablesIn()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(names, ServicesTables()) {
			t.Errorf("after the first sync the tables are %v, want %v (the stale shard gone)", names, ServicesTables())
		}
		if ok, _ := h.nftSetExists(uint8(nftables.TableFamilyINet), ServicesTable, ServiceIPs4); ok {
			t.Errorf("the main table kept its old map %s", ServiceIPs4)
		}
		if ok, _ := h.nftChainExists(uint8(nftables.TableFamilyINet), ServicesTable, "svc-old"); ok {
			t.Error("the main table kept its old chain svc-old")
		}
		// A restarted agent (new Services) adopts the tables: nothing to send.
		n := Transactions()
		if err := NewServices(h, ServicesOptions{}).Resync(snap); err != nil {
			t.Fatal(err)
		}
		if got := Transactions() - n; got != 0 {
			t.Errorf("a restarted agent's first sync of the same snapshot sent %d transactions, want 0", got)
		}
		if err := s.Delete(); err != nil {
			t.Fatal(err)
		}
		if names, err := h.ServicesTablesIn(); err != nil || len(names) != 0 {
			t.Errorf("after Delete the tables are %v (%v), want none", names, err)
		}
		if err := s.Delete(); err != nil {
			t.Errorf("Delete again: %v", err)
		}
	})
}

// TestServicesShardsClaims: an externalIP and port and a NodePort that
// two Services of two shards claim are written in the first claim's
// shard only; when that Service goes, Apply moves both to the other's
// shard (and the tables are then as a resync would write them).
func TestServicesShardsClaims(t *testing.T) {
	onKernels(t, "svccl", func(t *testing.T, h *Handle) {
		// two Service names of different shards, a before b
		a, b := "a-0", ""
		for i := 1; b == ""; i++ {
			if n := fmt.Sprintf("b-%d", i); shardOf(svcmodel.ServiceName{Namespace: "ns", Name: n}) != shardOf(svcmodel.ServiceName{Namespace: "ns", Name: a}) {
				b = n
			}
		}
		port := func(name, cip string) svcmodel.ServicePort {
			return svcmodel.ServicePort{Name: svcName("ns", name, ""), Family: svcmodel.IPv4, Protocol: svcmodel.TCP, HasEndpoints: true,
				Frontends: []svcmodel.Frontend{svcFE(svcmodel.ClusterIP, cip, 80, svcmodel.IPv4),
					svcFE(svcmodel.ExternalIP, "198.51.100.7", 80, svcmodel.IPv4), svcFE(svcmodel.NodePort, "", 30007, svcmodel.IPv4)},
				ClusterEndpoints: []svcmodel.Endpoint{svcEP("10.64.0."+cip[len(cip)-1:], 8080)}}
		}
		both := &svcmodel.Snapshot{NodePortAddrs: []netip.Addr{netip.MustParseAddr("192.0.2.10")},
			Ports: []svcmodel.ServicePort{port(a, "10.96.0.1"), port(b, "10.96.0.2")}}
		onlyB := &svcmodel.Snapshot{NodePortAddrs: both.NodePortAddrs, Ports: both.Ports[1:],
			Seq: 2, Partial: true, Changed: []svcmodel.ServiceName{{Namespace: "ns", Name: a}}}
		both.Seq = 1
		ext := string(frontElem(netip.MustParseAddr("198.51.100.7"), unix.IPPROTO_TCP, 80))
		np := string(npKey{unix.IPPROTO_TCP, 30007}.elem())
		where := func(set, key string) []string {
			var out []string
			for _, table := range ServicesTables()[1:] {
				els, err := h.dumpFamilyElems(nftables.TableFamilyINet, table, set)
				if err != nil {
					t.Fatal(err)
				}
				if slices.ContainsFunc(els, func(e nftElem) bool { return string(e.key) == key }) {
					out = append(out, table)
				}
			}
			return out
		}
		s := NewServices(h, ServicesOptions{})
		if err := s.Apply(both); err != nil {
			t.Fatal(err)
		}
		if got, want := where(ServiceIPs4, ext), []string{ServicesShardOf("ns", a)}; !slices.Equal(got, want) {
			t.Errorf("the shared externalIP is in %v, want %v (the first claim's)", got, want)
		}
		if got, want := where(ServiceNodePorts, np), []string{ServicesShardOf("ns", a)}; !slices.Equal(got, want) {
			t.Errorf("the shared NodePort is in %v, want %v", got, want)
		}
		if err := s.Apply(onlyB); err != nil {
			t.Fatal(err)
		}
		if s.st == nil {
			t.Fatal("Apply resynced")
		}
		if got, want := where(ServiceIPs4, ext), []string{ServicesShardOf("ns", b)}; !slices.Equal(got, want) {
			t.Errorf("after %s went the externalIP is in %v, want %v", a, got, want)
		}
		if got, want := where(ServiceNodePorts, np), []string{ServicesShardOf("ns", b)}; !slices.Equal(got, want) {
			t.Errorf("after %s went the NodePort is in %v, want %v", a, got, want)
		}
		n := Transactions()
		if err := s.Resync(onlyB); err != nil {
			t.Fatal(err)
		}
		if got := Transactions() - n; got != 0 {
			t.Errorf("a resync after the move sent %d transactions, want 0 (Apply left the tables other than the snapshot)", got)
		}
	})
}

// TestServicesShardSpecsAlone: a shard's rendering made alone (the
// periodic check's, one table at a time) is the one the whole rendering
// holds for it: the same sets with the same elements, the same chains
// with the same rules, for every shard (NodePorts, several endpoints and
// affinity among the Services).
func TestServicesShardSpecsAlone(t *testing.T) {
	snap := sortedSnap(manySnap(400, 3))
	s := NewServices(nil, ServicesOptions{})
	st := s.render(snap)
	whole := st.specs(s)
	if len(whole) != 1+svcShards {
		t.Fatalf("%d tables, want %d", len(whole), 1+svcShards)
	}
	if got := st.mainSpec(s); !reflect.DeepEqual(got, whole[0]) {
		t.Error("the main table's rendering alone differs from the whole's")
	}
	for i := range svcShards {
		alone := st.shardSpecs(i)
		if len(alone) != 1 {
			t.Fatalf("shard %d alone: %d tables", i, len(alone))
		}
		w, a := whole[1+i], alone[0]
		if a.table.Name != w.table.Name || len(a.sets) != len(w.sets) || len(a.chains) != len(w.chains) {
			t.Fatalf("shard %d alone: table %s, %d sets, %d chains; the whole's %s, %d, %d", i, a.table.Name, len(a.sets), len(a.chains), w.table.Name, len(w.sets), len(w.chains))
		}
		if !reflect.DeepEqual(a.sets, w.sets) || !reflect.DeepEqual(a.chains, w.chains) {
			t.Errorf("shard %d alone differs from the whole rendering's", i)
		}
		if len(w.chains) <= len(shardChains(true)) {
			t.Errorf("shard %d holds no Service's chain: the test shows nothing", i)
		}
	}
}

// TestServicesCheckRendersAShardAtATime: the periodic check's rendering,
// the outline of the kept state and one shard's chains and sets at a
// time, makes the same tables as the whole rendering, holds no other
// shard's chains, and leaves the kept state as it was.
func TestServicesCheckRendersAShardAtATime(t *testing.T) {
	snap := manySnap(400, 3)
	for i := range snap.Ports { // sets of their own: affinity, source ranges
		sp := &snap.Ports[i]
		if i%3 == 0 {
			sp.AffinityTimeout = 3 * time.Hour
		}
		if i%5 == 0 {
			sp.Frontends = append(sp.Frontends, svcFE(svcmodel.LoadBalancer, fmt.Sprintf("198.51.100.%d", 1+i%250), 80, svcmodel.IPv4))
			sp.SourceRanges = []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}
		}
	}
	snap = sortedSnap(snap)
	s := NewServices(nil, ServicesOptions{})
	kept := s.render(snap)
	whole := kept.specs(s)
	r := s.renderer(snap)
	st := outline(r, snap, slices.Collect(maps.Values(kept.ports)))
	if got := st.mainSpec(s); !reflect.DeepEqual(got, whole[0]) {
		t.Error("the main table from the outline differs from the whole rendering's")
	}
	held := func() (n int) {
		for _, ps := range st.ports {
			n += len(ps.r.chains) + len(ps.r.sets)
		}
		return n
	}
	if n := held(); n != 0 {
		t.Fatalf("the outline holds %d chains and sets of ServicePorts", n)
	}
	for i := range svcShards {
		st.renderShard(r, i)
		for key, ps := range st.ports {
			if shardOfKey(key) != i && len(ps.r.chains)+len(ps.r.sets) > 0 {
				t.Fatalf("shard %d rendered: %v of shard %d holds chains", i, key, shardOfKey(key))
			}
		}
		a := st.shardSpecs(i)[0]
		if !reflect.DeepEqual(a, whole[1+i]) {
			t.Errorf("shard %d from the outline differs from the whole rendering's", i)
		}
		if len(a.chains) <= len(shardChains(true)) || len(a.sets) <= 3+len(shardGlobals(snap))+2*svcSlotMaps {
			t.Errorf("shard %d holds no Service's chain or set: the test shows nothing", i)
		}
		st.renderShard(nil, i)
		if n := held(); n != 0 {
			t.Fatalf("shard %d dropped: %d chains and sets of ServicePorts left", i, n)
		}
	}
	if !reflect.DeepEqual(kept.specs(s), whole) {
		t.Error("the kept state's rendering changed under the check's")
	}
}

// TestServicesShardHooksFollowTheirServices: a shard has its nat base
// chains while one of its Services has a frontend or a NodePort, and
// none without (each new connection walks every hooked shard's): Apply
// adds them with a shard's first such Service and removes them with its
// last, and a full resync after each Apply finds the tables as it would
// write them.
func TestServicesShardHooksFollowTheirServices(t *testing.T) {
	k := nftfake.New()
	h := OpenDial(k.Dial())
	t.Cleanup(func() { h.Close() })
	s := NewServices(h, ServicesOptions{})
	all := manySnap(40, 1).Ports
	// two Services of two shards, and a third of the first one's shard
	var a, b, c svcmodel.ServicePort
	sa := shardOfKey(spKey(&all[0]))
	a, n := all[0], 0
	for i := 1; i < len(all) && n < 2; i++ {
		switch sh := shardOfKey(spKey(&all[i])); {
		case sh != sa && b.Name.Name == "":
			b, n = all[i], n+1
		case sh == sa && c.Name.Name == "":
			c, n = all[i], n+1
		}
	}
	if n < 2 {
		t.Fatal("manySnap(40) has no two Services of one shard and one of another")
	}
	sb := shardOfKey(spKey(&b))
	hooked := func() (out []int) {
		for i := range svcShards {
			spec := &tableSpec{table: svcShardTable(i), owned: true}
			have, err := h.dumpTable(spec)
			if err != nil {
				t.Fatal(err)
			}
			_, pre := have.chains["prerouting"]
			_, post := have.chains["output"]
			if pre != post {
				t.Fatalf("shard %d: prerouting %v, output %v", i, pre, post)
			}
			if pre {
				out = append(out, i)
			}
		}
		return out
	}
	steps := []struct {
		what  string
		ports []svcmodel.ServicePort
		want  []int
	}{
		{"one Service", []svcmodel.ServicePort{a}, []int{sa}},
		{"one of another shard comes", []svcmodel.ServicePort{a, b}, []int{sa, sb}},
		{"a second of the first shard", []svcmodel.ServicePort{a, b, c}, []int{sa, sb}},
		{"the first shard's first goes", []svcmodel.ServicePort{b, c}, []int{sa, sb}},
		{"the first shard's last goes", []svcmodel.ServicePort{b}, []int{sb}},
		{"a headless-like one (no frontend) in the first shard", []svcmodel.ServicePort{b, func() svcmodel.ServicePort {
			p := a
			p.Frontends = nil
			return p
		}()}, []int{sb}},
		{"none", nil, nil},
	}
	for _, st := range steps {
		snap := sortedSnap(&svcmodel.Snapshot{NodePortAddrs: []netip.Addr{netip.MustParseAddr("192.0.2.10")},
			ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.64.0.0/10")}, Ports: slices.Clone(st.ports)})
		if err := s.Apply(snap); err != nil {
			t.Fatalf("%s: %v", st.what, err)
		}
		want := slices.Clone(st.want)
		slices.Sort(want)
		if got := hooked(); !slices.Equal(got, want) {
			t.Errorf("%s: shards with base chains %v, want %v", st.what, got, want)
		}
		if changed, err := s.resync(snap); err != nil || changed {
			t.Errorf("%s: a resync after Apply changed the tables (%v, %v): Apply left them otherwise than a full sync writes them", st.what, changed, err)
		}
	}
}
