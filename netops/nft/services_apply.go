package nft

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/google/nftables"

	"github.com/cnibox/cnibox/internal/svcmodel"
)

// Apply's incremental write (services.go): the ServicePorts that differ
// from the last snapshot are rendered again and compared with their last
// rendering, and only what differs is queued, in one transaction, in an
// order the kernel accepts: new sets and their elements, new chains, the
// rules of new and changed chains (flushed first), the frontend and
// global elements, then the deletions (chains flushed before any is
// deleted, sets last).

// spEqual reports whether two ServicePorts render the same.
func spEqual(a, b *svcmodel.ServicePort) bool {
	return a.Name == b.Name && a.Family == b.Family && a.Protocol == b.Protocol &&
		slices.Equal(a.Frontends, b.Frontends) && slices.Equal(a.ClusterEndpoints, b.ClusterEndpoints) &&
		slices.Equal(a.LocalEndpoints, b.LocalEndpoints) && a.ExternalLocal == b.ExternalLocal &&
		a.InternalLocal == b.InternalLocal && a.HasEndpoints == b.HasEndpoints &&
		a.AffinityTimeout == b.AffinityTimeout && slices.Equal(a.SourceRanges, b.SourceRanges)
}

// applyDiff queues and commits what makes the table (as s.st says it is)
// hold snap; it returns the new state and the UDP endpoints that left.
// s.st is changed: the caller drops it on error.
func (s *Services) applyDiff(snap *svcmodel.Snapshot) (*svcState, []netip.AddrPort, error) {
	st := s.st
	r := s.renderer(snap)
	if !maps.Equal(r.hasCIDR, st.hasCIDR) {
		// Every internal chain changes: the whole table is resynced.
		next := s.render(snap)
		if _, err := s.h.reconcile(next.specs(s)...); err != nil {
			return nil, nil, err
		}
		return next, st.goneUDP(next), nil
	}
	want, changed := st.changed(snap)
	wasHooked := st.hooked

	// What the changed ServicePorts touch, before.
	olds := map[spk]*spState{}
	oldFront := map[frontKey]frontAt{}
	oldNP := map[npKey]npAt{}
	oldHP := map[netip.Addr]int{}
	oldCIP := map[netip.Addr]int{}
	for _, key := range changed {
		ps := st.ports[key]
		if ps == nil {
			continue
		}
		olds[key] = ps
		for _, fc := range ps.r.fronts {
			oldFront[fc.fk] = st.frontAt(fc.fk)
		}
		for _, k := range ps.r.nodeports {
			oldNP[k] = st.npAt(k)
		}
		for _, a := range ps.r.eps {
			oldHP[a] = st.hairpin[a]
		}
		for _, a := range ps.r.cips {
			oldCIP[a] = st.cips[a]
		}
		st.unclaim(key)
	}
	var gone []netip.AddrPort
	for _, key := range changed {
		sp := want[key]
		if sp == nil {
			if old := olds[key]; old != nil {
				gone = append(gone, goneOf(old.sp, nil)...)
			}
			continue
		}
		cp := *sp
		ps := &spState{sp: &cp, r: r.render(&cp)}
		if old := olds[key]; old != nil {
			gone = append(gone, goneOf(old.sp, ps)...)
		}
		for _, fc := range ps.r.fronts {
			if _, ok := oldFront[fc.fk]; !ok {
				oldFront[fc.fk] = st.frontAt(fc.fk)
			}
		}
		for _, k := range ps.r.nodeports {
			if _, ok := oldNP[k]; !ok {
				oldNP[k] = st.npAt(k)
			}
		}
		for _, a := range ps.r.eps {
			if _, ok := oldHP[a]; !ok {
				oldHP[a] = st.hairpin[a]
			}
		}
		for _, a := range ps.r.cips {
			if _, ok := oldCIP[a]; !ok {
				oldCIP[a] = st.cips[a]
			}
		}
		st.claim(key, ps)
	}

	t := s.h.tx()
	q := &svcQueue{t: t, s: s}
	// Sets and their elements.
	for _, key := range changed {
		if ps := st.ports[key]; ps != nil {
			if err := q.in(shardTableOf(key)).sets(olds[key], ps); err != nil {
				t.abort()
				return nil, nil, err
			}
		}
	}
	// Their slots (the family's slot map).
	for _, key := range changed {
		var was, now []nftables.SetElement
		var sp *svcmodel.ServicePort
		if o := olds[key]; o != nil {
			was, sp = slotElems(o.r.slots), o.sp
		}
		if ps := st.ports[key]; ps != nil {
			now, sp = slotElems(ps.r.slots), ps.sp
		}
		if err := q.in(shardTableOf(key)).elems(slotMap(svcFam(sp.Family), slotShard(sp)), was, now); err != nil {
			t.abort()
			return nil, nil, err
		}
	}
	// Chains, then their rules.
	type tableChain struct {
		q  *svcQueue
		cs chainSpec
	}
	var fill []tableChain
	for _, key := range changed {
		ps := st.ports[key]
		if ps == nil {
			continue
		}
		var old map[string]chainSpec
		if o := olds[key]; o != nil {
			old = chainsByName(o.r.chains)
		}
		sq := q.in(shardTableOf(key))
		for _, cs := range ps.r.chains {
			oc, ok := old[cs.name]
			if !ok {
				t.conn().AddChain(&nftables.Chain{Name: cs.name, Table: sq.table})
			} else if slices.EqualFunc(oc.rules, cs.rules, sameRule) {
				continue
			}
			s.touch("chain " + sq.name(cs.name))
			fill = append(fill, tableChain{sq, chainSpec{name: cs.name, rules: cs.rules, appendOnly: ok}}) // appendOnly: existed, flush it
		}
	}
	for _, k := range sortedNPKeys(oldNP) {
		ns, nr := st.npAt(k).shard, st.npAt(k).rules
		sq := q.in(shardTableOrNil(ns))
		switch o := oldNP[k]; {
		case len(nr) == 0 || o.shard == ns && slices.EqualFunc(o.rules, nr, sameRule):
		case o.shard != ns:
			s.touch("chain " + sq.name(k.chain()))
			t.conn().AddChain(&nftables.Chain{Name: k.chain(), Table: sq.table})
			fill = append(fill, tableChain{sq, chainSpec{name: k.chain(), rules: nr}})
		default:
			s.touch("chain " + sq.name(k.chain()))
			fill = append(fill, tableChain{sq, chainSpec{name: k.chain(), rules: nr, appendOnly: true}})
		}
	}
	for _, tc := range fill {
		ch := &nftables.Chain{Name: tc.cs.name, Table: tc.q.table}
		if tc.cs.appendOnly {
			t.conn().FlushChain(ch)
		}
		for _, r := range tc.cs.rules {
			r.Table, r.Chain = tc.q.table, ch
			t.conn().AddRule(r)
		}
	}
	// The base chains of shards that got their first frontend or
	// NodePort, or lost their last (shardChains).
	for sh := range svcShards {
		was, now := wasHooked[sh] > 0, st.hooked[sh] > 0
		if was == now {
			continue
		}
		sq := q.in(svcShardTable(sh))
		for _, cs := range shardChains(true) {
			if cs.hook == nil {
				continue
			}
			s.touch("chain " + sq.name(cs.name))
			if now {
				cs.fill(t, sq.table, false)
				continue
			}
			ch := &nftables.Chain{Name: cs.name, Table: sq.table}
			t.conn().FlushChain(ch)
			t.conn().DelChain(ch)
		}
	}
	// The frontend, NodePort and global elements.
	if err := q.fronts(st, oldFront, oldNP); err != nil {
		t.abort()
		return nil, nil, err
	}
	if err := q.globals(st, snap, oldHP, oldCIP); err != nil {
		t.abort()
		return nil, nil, err
	}
	// Deletions: chains (all flushed first), NodePort chains, sets.
	type tableName struct {
		q    *svcQueue
		name string
	}
	var dropChains, dropSets []tableName
	for _, key := range changed {
		o := olds[key]
		if o == nil {
			continue
		}
		var now spRender
		if ps := st.ports[key]; ps != nil {
			now = ps.r
		}
		sq := q.in(shardTableOf(key))
		keep := chainsByName(now.chains)
		for _, cs := range o.r.chains {
			if _, ok := keep[cs.name]; !ok {
				dropChains = append(dropChains, tableName{sq, cs.name})
			}
		}
		for _, ss := range o.r.sets {
			if !slices.ContainsFunc(now.sets, func(n setSpec) bool { return n.set.Name == ss.set.Name }) {
				dropSets = append(dropSets, tableName{sq, ss.set.Name})
			}
		}
	}
	for _, k := range sortedNPKeys(oldNP) {
		if o := oldNP[k]; o.shard >= 0 && st.npAt(k).shard != o.shard {
			dropChains = append(dropChains, tableName{q.in(svcShardTable(o.shard)), k.chain()})
		}
	}
	for _, d := range dropChains {
		s.touch("chain " + d.q.name(d.name))
		t.conn().FlushChain(&nftables.Chain{Name: d.name, Table: d.q.table})
	}
	for _, d := range dropChains {
		t.conn().DelChain(&nftables.Chain{Name: d.name, Table: d.q.table})
	}
	for _, d := range dropSets {
		s.touch("set " + d.q.name(d.name))
		t.conn().DelSet(&nftables.Set{Name: d.name, Table: d.q.table})
	}
	st.snap = snap
	if err := t.commit(); err != nil {
		return nil, nil, err
	}
	slices.SortFunc(gone, netip.AddrPort.Compare)
	return st, slices.Compact(gone), nil
}

// frontAt is where a frontend element is: its shard (-1: none) and
// chain ("": none).
type frontAt struct {
	shard int
	chain string
}

func (st *svcState) frontAt(fk frontKey) frontAt {
	sh, c := st.front(fk)
	return frontAt{sh, c}
}

// npAt is a NodePort's shard (-1: none) and its chain's rules there.
type npAt struct {
	shard int
	rules []*nftables.Rule
}

func (st *svcState) npAt(k npKey) npAt {
	sh, rules := st.np(k)
	return npAt{sh, rules}
}

// shardTableOf is the shard table of a ServicePort.
func shardTableOf(k spk) *nftables.Table { return svcShardTable(shardOfKey(k)) }

// shardTableOrNil is shard i's table, nil for -1.
func shardTableOrNil(i int) *nftables.Table {
	if i < 0 {
		return nil
	}
	return svcShardTable(i)
}

// changed are the keys of the ServicePorts whose rendering may differ
// between st and snap (sorted), with snap's ServicePorts of those keys
// (want): of the Services snap.Changed names when snap follows the
// snapshot st holds (svcmodel.Snapshot.Partial), else of all.
func (st *svcState) changed(snap *svcmodel.Snapshot) (map[spk]*svcmodel.ServicePort, []spk) {
	var changed []spk
	partial := snap.Partial && snap.Seq != 0 && st.snap != nil && snap.Seq == st.snap.Seq+1
	if !partial {
		want := make(map[spk]*svcmodel.ServicePort, snap.Len())
		for sp := range snap.All() {
			want[spKey(sp)] = sp
		}
		for key, ps := range st.ports {
			if sp, ok := want[key]; !ok || !spEqual(ps.sp, sp) {
				changed = append(changed, key)
			}
		}
		for key := range want {
			if _, ok := st.ports[key]; !ok {
				changed = append(changed, key)
			}
		}
		slices.SortFunc(changed, cmpSpk)
		return want, changed
	}
	want := map[spk]*svcmodel.ServicePort{}
	seen := map[spk]bool{}
	for _, sn := range snap.Changed {
		for sp := range snap.Service(sn) {
			key := spKey(sp)
			want[key] = sp
			if ps, ok := st.ports[key]; (!ok || !spEqual(ps.sp, sp)) && !seen[key] {
				seen[key] = true
				changed = append(changed, key)
			}
		}
		for _, key := range st.bySvc[sn] {
			if _, ok := want[key]; !ok && !seen[key] {
				seen[key] = true
				changed = append(changed, key)
			}
		}
	}
	slices.SortFunc(changed, cmpSpk)
	return want, changed
}

func chainsByName(cs []chainSpec) map[string]chainSpec {
	m := make(map[string]chainSpec, len(cs))
	for _, c := range cs {
		m[c.name] = c
	}
	return m
}

func sortedNPKeys(m map[npKey]npAt) []npKey {
	st := &svcState{nps: map[npKey]map[spk]npClaim{}}
	for k := range m {
		st.nps[k] = nil
	}
	return st.npKeys()
}
