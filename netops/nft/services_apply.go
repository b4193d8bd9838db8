package nft

import (
	"bytes"
	"cmp"
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
		if _, err := s.h.reconcile(next.spec(s)); err != nil {
			return nil, nil, err
		}
		return next, st.goneUDP(next), nil
	}
	want, changed := st.changed(snap)

	// What the changed ServicePorts touch, before.
	olds := map[spk]*spState{}
	oldFront := map[frontKey]string{}
	oldNP := map[npKey][]*nftables.Rule{}
	oldHP := map[netip.Addr]int{}
	oldCIP := map[netip.Addr]int{}
	for _, key := range changed {
		ps := st.ports[key]
		if ps == nil {
			continue
		}
		olds[key] = ps
		for _, fc := range ps.r.fronts {
			oldFront[fc.fk] = st.front(fc.fk)
		}
		for _, k := range ps.r.nodeports {
			oldNP[k] = st.npRules(k)
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
				oldFront[fc.fk] = st.front(fc.fk)
			}
		}
		for _, k := range ps.r.nodeports {
			if _, ok := oldNP[k]; !ok {
				oldNP[k] = st.npRules(k)
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
	q := &svcQueue{t: t, table: svcTable(), s: s}
	// Sets and their elements.
	for _, key := range changed {
		if ps := st.ports[key]; ps != nil {
			if err := q.sets(olds[key], ps); err != nil {
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
		if err := q.elems(slotMap(svcFam(sp.Family), slotShard(sp)), was, now); err != nil {
			t.abort()
			return nil, nil, err
		}
	}
	// Chains, then their rules.
	var fill []chainSpec
	for _, key := range changed {
		ps := st.ports[key]
		if ps == nil {
			continue
		}
		var old map[string]chainSpec
		if o := olds[key]; o != nil {
			old = chainsByName(o.r.chains)
		}
		for _, cs := range ps.r.chains {
			oc, ok := old[cs.name]
			if !ok {
				t.conn().AddChain(&nftables.Chain{Name: cs.name, Table: q.table})
			} else if slices.EqualFunc(oc.rules, cs.rules, sameRule) {
				continue
			}
			s.touch("chain " + cs.name)
			fill = append(fill, chainSpec{name: cs.name, rules: cs.rules, appendOnly: ok}) // appendOnly: existed, flush it
		}
	}
	for _, k := range sortedNPKeys(oldNP) {
		nr := st.npRules(k)
		switch or := oldNP[k]; {
		case len(nr) == 0 || slices.EqualFunc(or, nr, sameRule):
		case len(or) == 0:
			s.touch("chain " + k.chain())
			t.conn().AddChain(&nftables.Chain{Name: k.chain(), Table: q.table})
			fill = append(fill, chainSpec{name: k.chain(), rules: nr})
		default:
			s.touch("chain " + k.chain())
			fill = append(fill, chainSpec{name: k.chain(), rules: nr, appendOnly: true})
		}
	}
	for _, cs := range fill {
		ch := &nftables.Chain{Name: cs.name, Table: q.table}
		if cs.appendOnly {
			t.conn().FlushChain(ch)
		}
		for _, r := range cs.rules {
			r.Table, r.Chain = q.table, ch
			t.conn().AddRule(r)
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
	var dropChains, dropSets []string
	for _, key := range changed {
		o := olds[key]
		if o == nil {
			continue
		}
		var now spRender
		if ps := st.ports[key]; ps != nil {
			now = ps.r
		}
		keep := chainsByName(now.chains)
		for _, cs := range o.r.chains {
			if _, ok := keep[cs.name]; !ok {
				dropChains = append(dropChains, cs.name)
			}
		}
		for _, ss := range o.r.sets {
			if !slices.ContainsFunc(now.sets, func(n setSpec) bool { return n.set.Name == ss.set.Name }) {
				dropSets = append(dropSets, ss.set.Name)
			}
		}
	}
	for _, k := range sortedNPKeys(oldNP) {
		if len(oldNP[k]) > 0 && len(st.nps[k]) == 0 {
			dropChains = append(dropChains, k.chain())
		}
	}
	for _, name := range dropChains {
		s.touch("chain " + name)
		t.conn().FlushChain(&nftables.Chain{Name: name, Table: q.table})
	}
	for _, name := range dropChains {
		t.conn().DelChain(&nftables.Chain{Name: name, Table: q.table})
	}
	for _, name := range dropSets {
		s.touch("set " + name)
		t.conn().DelSet(&nftables.Set{Name: name, Table: q.table})
	}
	st.snap = snap
	if err := t.commit(); err != nil {
		return nil, nil, err
	}
	slices.SortFunc(gone, netip.AddrPort.Compare)
	return st, slices.Compact(gone), nil
}

// changed are the keys of the ServicePorts whose rendering may differ
// between st and snap (sorted), with snap's ServicePorts of those keys
// (want): of the Services snap.Changed names when snap follows the
// snapshot st holds (svcmodel.Snapshot.Partial), else of all.
func (st *svcState) changed(snap *svcmodel.Snapshot) (map[spk]*svcmodel.ServicePort, []spk) {
	var changed []spk
	partial := snap.Partial && snap.Seq != 0 && st.snap != nil && snap.Seq == st.snap.Seq+1
	if !partial {
		want := make(map[spk]*svcmodel.ServicePort, len(snap.Ports))
		for i := range snap.Ports {
			want[spKey(&snap.Ports[i])] = &snap.Ports[i]
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
		// snap.Ports is sorted by name: the Service's are one run.
		i, _ := slices.BinarySearchFunc(snap.Ports, sn, func(p svcmodel.ServicePort, sn svcmodel.ServiceName) int {
			return cmp.Or(cmp.Compare(p.Name.Namespace, sn.Namespace), cmp.Compare(p.Name.Name, sn.Name))
		})
		for ; i < len(snap.Ports) && snap.Ports[i].Name.Namespace == sn.Namespace && snap.Ports[i].Name.Name == sn.Name; i++ {
			sp := &snap.Ports[i]
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

func sortedNPKeys(m map[npKey][]*nftables.Rule) []npKey {
	st := &svcState{nps: map[npKey]map[spk]npClaim{}}
	for k := range m {
		st.nps[k] = nil
	}
	return st.npKeys()
}

// svcQueue queues element changes on one transaction.
type svcQueue struct {
	t     *txn
	table *nftables.Table
	s     *Services // (touch)
}

// sets queues ps's sets: new ones made with their elements, others'
// elements changed where they differ (an interval set filled again).
func (q *svcQueue) sets(old, ps *spState) error {
	var have map[string]setSpec
	if old != nil {
		have = map[string]setSpec{}
		for _, ss := range old.r.sets {
			have[ss.set.Name] = ss
		}
	}
	for _, ss := range ps.r.sets {
		ss.set.Table = q.table
		hs, ok := have[ss.set.Name]
		if !ok {
			q.s.touch("set " + ss.set.Name)
			if err := q.t.addSet(ss.set, nil); err != nil {
				return err
			}
			if len(ss.elems) > 0 {
				if err := q.t.setAddElements(ss.set, ss.elems); err != nil {
					return err
				}
			}
			continue
		}
		if ss.kept {
			// An affinity map: its slots mean others when their count
			// changes (else Maglev kept most of them).
			if slotCount(len(chosen(old.sp))) != slotCount(len(chosen(ps.sp))) {
				q.s.touch("set " + ss.set.Name)
				q.t.conn().FlushSet(ss.set)
			}
			continue
		}
		if err := q.elems(ss.set, hs.elems, ss.elems); err != nil {
			return err
		}
	}
	return nil
}

// elems queues what makes set's elements (old) want.
func (q *svcQueue) elems(set *nftables.Set, old, want []nftables.SetElement) error {
	set.Table = q.table
	if set.Interval {
		if slices.EqualFunc(old, want, sameElem) {
			return nil
		}
		q.s.touch("set " + set.Name)
		q.t.conn().FlushSet(set)
		if len(want) == 0 {
			return nil
		}
		return q.t.setAddElements(set, want)
	}
	byKey := make(map[string]nftables.SetElement, len(old))
	for _, e := range old {
		byKey[string(e.Key)] = e
	}
	var add, del []nftables.SetElement
	for _, e := range want {
		o, ok := byKey[string(e.Key)]
		if ok && sameElem(o, e) {
			delete(byKey, string(e.Key))
			continue
		}
		if ok {
			del = append(del, nftables.SetElement{Key: e.Key})
			delete(byKey, string(e.Key))
		}
		add = append(add, e)
	}
	for _, e := range old {
		if _, ok := byKey[string(e.Key)]; ok {
			del = append(del, nftables.SetElement{Key: e.Key})
		}
	}
	if q.s.touched != nil {
		for _, e := range slices.Concat(add, del) {
			q.s.touch(elemName(set.Name, e.Key))
		}
	}
	if len(del) > 0 {
		if err := q.t.setDeleteElements(set, del); err != nil {
			return err
		}
	}
	if len(add) > 0 {
		return q.t.setAddElements(set, add)
	}
	return nil
}

func sameElem(a, b nftables.SetElement) bool {
	if !bytes.Equal(a.Key, b.Key) || a.IntervalEnd != b.IntervalEnd || !bytes.Equal(a.Val, b.Val) {
		return false
	}
	if a.VerdictData == nil || b.VerdictData == nil {
		return a.VerdictData == b.VerdictData
	}
	return a.VerdictData.Kind == b.VerdictData.Kind && a.VerdictData.Chain == b.VerdictData.Chain
}

// fronts queues the frontend elements whose chain changed, and the
// NodePort elements that came or went.
func (q *svcQueue) fronts(st *svcState, oldFront map[frontKey]string, oldNP map[npKey][]*nftables.Rule) error {
	var old, want []nftables.SetElement
	sets := map[string][2][]nftables.SetElement{}
	for fk, oc := range oldFront {
		nc := st.front(fk)
		if oc == nc {
			continue
		}
		p := sets[fk.set]
		if oc != "" {
			p[0] = append(p[0], nftables.SetElement{Key: []byte(fk.key), VerdictData: gotoChain(oc)})
		}
		if nc != "" {
			p[1] = append(p[1], nftables.SetElement{Key: []byte(fk.key), VerdictData: gotoChain(nc)})
		}
		sets[fk.set] = p
	}
	for _, name := range slices.Sorted(maps.Keys(sets)) {
		if err := q.elems(&nftables.Set{Name: name, IsMap: true, DataType: nftables.TypeVerdict}, sets[name][0], sets[name][1]); err != nil {
			return err
		}
	}
	for _, k := range sortedNPKeys(oldNP) {
		had, has := len(oldNP[k]) > 0, len(st.nps[k]) > 0
		e := nftables.SetElement{Key: k.elem(), VerdictData: gotoChain(k.chain())}
		switch {
		case had && !has:
			old = append(old, e)
		case has && !had:
			want = append(want, e)
		}
	}
	if len(old)+len(want) == 0 {
		return nil
	}
	return q.elems(&nftables.Set{Name: ServiceNodePorts, IsMap: true, DataType: nftables.TypeVerdict}, old, want)
}

// globals queues the NodePort addresses, the cluster's networks, the
// Service ranges, and the hairpin and ClusterIP elements that changed.
func (q *svcQueue) globals(st *svcState, snap *svcmodel.Snapshot, oldHP, oldCIP map[netip.Addr]int) error {
	was := st.globalSetsOf(st.snap)
	now := st.globalSetsOf(snap)
	for i := range was {
		if err := q.elems(now[i].set, was[i].elems, now[i].elems); err != nil {
			return err
		}
	}
	var hp [2][2][]nftables.SetElement // family, old/new
	for _, a := range slices.SortedFunc(maps.Keys(oldHP), netip.Addr.Compare) {
		had, has := oldHP[a] > 0, st.hairpin[a] > 0
		e := nftables.SetElement{Key: hairpinKey(a)}
		switch {
		case had && !has:
			hp[famIdx(a)][0] = append(hp[famIdx(a)][0], e)
		case has && !had:
			hp[famIdx(a)][1] = append(hp[famIdx(a)][1], e)
		}
	}
	for i, name := range []string{svcHairpin4, svcHairpin6} {
		if err := q.elems(&nftables.Set{Name: name}, hp[i][0], hp[i][1]); err != nil {
			return err
		}
	}
	var cip [2][2][]nftables.SetElement // family, old/new
	for _, a := range slices.SortedFunc(maps.Keys(oldCIP), netip.Addr.Compare) {
		had, has := oldCIP[a] > 0, st.cips[a] > 0
		e := nftables.SetElement{Key: a.AsSlice()}
		switch {
		case had && !has:
			cip[famIdx(a)][0] = append(cip[famIdx(a)][0], e)
		case has && !had:
			cip[famIdx(a)][1] = append(cip[famIdx(a)][1], e)
		}
	}
	for i, name := range []string{svcClusterIPs4, svcClusterIPs6} {
		if err := q.elems(&nftables.Set{Name: name}, cip[i][0], cip[i][1]); err != nil {
			return err
		}
	}
	return nil
}

// globalSetsOf are the NodePort addresses', the cluster networks' and
// the Service ranges' sets of snap.
func (st *svcState) globalSetsOf(snap *svcmodel.Snapshot) []setSpec {
	sub := &svcState{snap: snap}
	all := sub.globalSets()
	return all[3:9]
}
