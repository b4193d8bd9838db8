package nft

import (
	"maps"
	"slices"
)

// The services tables as a state renders them, for the core's
// reconcile (a full sync: every table at once) and the periodic check
// (one table at a time).

// specs are the tables as st renders them: the main table, then the
// shards in order.
func (st *svcState) specs(s *Services) []*tableSpec {
	return append([]*tableSpec{st.mainSpec(s)}, st.shardSpecs(-1)...)
}

// mainSpec is the main table as st renders it.
func (st *svcState) mainSpec(s *Services) *tableSpec {
	return &tableSpec{table: svcTable(), owned: true, what: "the services table", sets: st.mainSets(), chains: s.mainChains()}
}

// shardSpecs are the shards as st renders them, in order; with only >=
// 0, shard only's alone (a check holds one shard's rendering at a time:
// all of them at 30,000 Services are some 200 MB).
func (st *svcState) shardSpecs(only int) []*tableSpec {
	var out []*tableSpec
	at := map[int]*tableSpec{}
	sets := st.shardSets(only)
	for i := range svcShards {
		if only >= 0 && i != only {
			continue
		}
		at[i] = &tableSpec{table: svcShardTable(i), owned: true, what: "the services table " + shardName(i),
			sets: sets[i], chains: shardChains(st.hooked[i] > 0)}
		out = append(out, at[i])
	}
	for _, k := range st.npKeys() {
		sh, rules := st.np(k)
		if ts := at[sh]; ts != nil {
			ts.chains = append(ts.chains, chainSpec{name: k.chain(), rules: rules})
		}
	}
	for _, key := range slices.SortedFunc(maps.Keys(st.ports), cmpSpk) {
		if ts := at[shardOfKey(key)]; ts != nil {
			r := st.ports[key].r
			ts.sets = append(ts.sets, r.sets...)
			ts.chains = append(ts.chains, r.chains...)
		}
	}
	return out
}
