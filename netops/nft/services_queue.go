package nft

import (
	"bytes"
	"maps"
	"net/netip"
	"slices"

	"github.com/google/nftables"

	"github.com/cnibox/cnibox/internal/svcmodel"
)

// The element changes of Apply's incremental write (services_apply.go),
// queued on its transaction: sets, frontends and NodePorts, and the
// table's global sets.

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
	if err := q.counted(oldHP, st.hairpin, hairpinKey, svcHairpin4, svcHairpin6); err != nil {
		return err
	}
	return q.counted(oldCIP, st.cips, netip.Addr.AsSlice, svcClusterIPs4, svcClusterIPs6)
}

// counted queues the elements of a pair of address sets (IPv4, IPv6)
// kept from use counts: an address whose count fell to 0 leaves its
// set, one whose count rose from 0 joins it; old holds every address
// that had or has a count.
func (q *svcQueue) counted(old, now map[netip.Addr]int, key func(netip.Addr) []byte, set4, set6 string) error {
	var ch [2][2][]nftables.SetElement // family, old/new
	for _, a := range slices.SortedFunc(maps.Keys(old), netip.Addr.Compare) {
		had, has := old[a] > 0, now[a] > 0
		e := nftables.SetElement{Key: key(a)}
		switch {
		case had && !has:
			ch[famIdx(a)][0] = append(ch[famIdx(a)][0], e)
		case has && !had:
			ch[famIdx(a)][1] = append(ch[famIdx(a)][1], e)
		}
	}
	for i, name := range []string{set4, set6} {
		if err := q.elems(&nftables.Set{Name: name}, ch[i][0], ch[i][1]); err != nil {
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
