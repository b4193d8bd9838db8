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

// The element changes of Apply's incremental write (services_apply.go),
// queued on its transaction: sets, frontends and NodePorts, and the
// table's global sets.

// svcQueue queues element changes on one transaction, in one table.
type svcQueue struct {
	t     *txn
	table *nftables.Table
	s     *Services // (touch)
}

// in is q in table tb.
func (q *svcQueue) in(tb *nftables.Table) *svcQueue {
	c := *q
	c.table = tb
	return &c
}

// name is what the check's drift calls object n of q's table.
func (q *svcQueue) name(n string) string { return q.table.Name + "/" + n }

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
			q.s.touch("set " + q.name(ss.set.Name))
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
				q.s.touch("set " + q.name(ss.set.Name))
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
		q.s.touch("set " + q.name(set.Name))
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
			q.s.touch(elemName(q.name(set.Name), e.Key))
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

// fronts queues the frontend elements whose chain or shard changed,
// and the NodePort elements that came, went or moved.
func (q *svcQueue) fronts(st *svcState, oldFront map[frontKey]frontAt, oldNP map[npKey]npAt) error {
	type shardSet struct {
		shard int
		set   string
	}
	sets := map[shardSet][2][]nftables.SetElement{}
	put := func(shard int, set string, i int, e nftables.SetElement) {
		k := shardSet{shard, set}
		p := sets[k]
		p[i] = append(p[i], e)
		sets[k] = p
	}
	for fk, o := range oldFront {
		n := st.frontAt(fk)
		if o == n {
			continue
		}
		if o.chain != "" {
			put(o.shard, fk.set, 0, nftables.SetElement{Key: []byte(fk.key), VerdictData: gotoChain(o.chain)})
		}
		if n.chain != "" {
			put(n.shard, fk.set, 1, nftables.SetElement{Key: []byte(fk.key), VerdictData: gotoChain(n.chain)})
		}
	}
	for _, k := range sortedNPKeys(oldNP) {
		o, n := oldNP[k].shard, st.npAt(k).shard
		if o == n {
			continue
		}
		e := nftables.SetElement{Key: k.elem(), VerdictData: gotoChain(k.chain())}
		if o >= 0 {
			put(o, ServiceNodePorts, 0, e)
		}
		if n >= 0 {
			put(n, ServiceNodePorts, 1, e)
		}
	}
	keys := slices.SortedFunc(maps.Keys(sets), func(a, b shardSet) int {
		return cmp.Or(cmp.Compare(a.shard, b.shard), cmp.Compare(a.set, b.set))
	})
	for _, k := range keys {
		set := &nftables.Set{Name: k.set, IsMap: true, DataType: nftables.TypeVerdict}
		if err := q.in(svcShardTable(k.shard)).elems(set, sets[k][0], sets[k][1]); err != nil {
			return err
		}
	}
	return nil
}

// globals queues the NodePort addresses, the cluster's networks (in
// every shard), the Service ranges, and the hairpin and ClusterIP
// elements that changed (in the main table).
func (q *svcQueue) globals(st *svcState, snap *svcmodel.Snapshot, oldHP, oldCIP map[netip.Addr]int) error {
	for i := range svcShards {
		was, now := shardGlobals(st.snap), shardGlobals(snap)
		for j := range was {
			if err := q.in(svcShardTable(i)).elems(now[j].set, was[j].elems, now[j].elems); err != nil {
				return err
			}
		}
	}
	mq := q.in(svcTable())
	was, now := serviceCIDRSets(st.snap), serviceCIDRSets(snap)
	for i := range was {
		if err := mq.elems(now[i].set, was[i].elems, now[i].elems); err != nil {
			return err
		}
	}
	if err := mq.counted(oldHP, st.hairpin, hairpinKey, svcHairpin4, svcHairpin6); err != nil {
		return err
	}
	return mq.counted(oldCIP, st.cips, netip.Addr.AsSlice, svcClusterIPs4, svcClusterIPs6)
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
