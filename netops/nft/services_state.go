package nft

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"

	"github.com/cnibox/cnibox/internal/svcmodel"
)

// The services table's state: what a snapshot renders to, kept between
// syncs so that Apply writes only what a change touches, and the whole
// table as a spec of the core (Resync).

// svcState is the table as one snapshot renders it.
type svcState struct {
	snap    *svcmodel.Snapshot
	hasCIDR map[svcmodel.Family]bool
	ports   map[spk]*spState
	// fronts: each frontend element's claims, ServicePort key -> chain
	// (one in a valid cluster; two Services claiming one address and
	// port: the first key wins, as ordered).
	fronts map[frontKey][]portChain
	// nps: each NodePort's claims, ServicePort key -> family and chain.
	nps map[npKey]map[spk]npClaim
	// hairpin: how many ServicePorts have each endpoint address.
	hairpin map[netip.Addr]int
	// cips: how many ServicePorts have each ClusterIP (cluster-ips4/6).
	cips map[netip.Addr]int
	// bySvc: each Service's ServicePort keys (Apply's partial diff).
	bySvc map[svcmodel.ServiceName][]spk
}

// portChain is a ServicePort's claim of a frontend: its chain (a slice
// of these per frontend, not a map: almost every frontend has one, and a
// map each was a third of the table state's heap).
type portChain struct {
	key   spk
	chain string
}

type spState struct {
	// sp is a copy of the snapshot's (a pointer into the snapshot's
	// array would keep every snapshot's array alive that an unchanged
	// ServicePort was last rendered from).
	sp *svcmodel.ServicePort
	r  spRender
}

type npClaim struct {
	f     svcmodel.Family
	chain string
}

// renderer is the renderer of snap.
func (s *Services) renderer(snap *svcmodel.Snapshot) *renderer {
	r := &renderer{mark: s.opts.MasqMark, hasCIDR: map[svcmodel.Family]bool{}}
	for _, p := range snap.ClusterCIDRs {
		r.hasCIDR[svcmodel.FamilyOf(p.Addr())] = true
	}
	return r
}

// render renders all of snap.
func (s *Services) render(snap *svcmodel.Snapshot) *svcState {
	r := s.renderer(snap)
	st := &svcState{snap: snap, hasCIDR: r.hasCIDR, ports: map[spk]*spState{},
		fronts: map[frontKey][]portChain{}, nps: map[npKey]map[spk]npClaim{}, hairpin: map[netip.Addr]int{},
		cips: map[netip.Addr]int{}, bySvc: map[svcmodel.ServiceName][]spk{}}
	for i := range snap.Ports {
		sp := snap.Ports[i]
		st.claim(spKey(&sp), &spState{sp: &sp, r: r.render(&sp)})
	}
	return st
}

// claim adds a ServicePort's state and its claims.
func (st *svcState) claim(key spk, ps *spState) {
	st.ports[key] = ps
	sn := svcOf(key)
	st.bySvc[sn] = append(st.bySvc[sn], key)
	for _, fc := range ps.r.fronts {
		claims := slices.DeleteFunc(st.fronts[fc.fk], func(c portChain) bool { return c.key == key })
		st.fronts[fc.fk] = append(claims, portChain{key, fc.chain})
	}
	for _, k := range ps.r.nodeports {
		if st.nps[k] == nil {
			st.nps[k] = map[spk]npClaim{}
		}
		st.nps[k][key] = npClaim{ps.sp.Family, ps.r.ext}
	}
	for _, a := range ps.r.eps {
		st.hairpin[a]++
	}
	for _, a := range ps.r.cips {
		st.cips[a]++
	}
}

// unclaim removes a ServicePort's state and its claims.
func (st *svcState) unclaim(key spk) {
	ps := st.ports[key]
	if ps == nil {
		return
	}
	delete(st.ports, key)
	sn := svcOf(key)
	if keys := slices.DeleteFunc(st.bySvc[sn], func(k spk) bool { return k == key }); len(keys) > 0 {
		st.bySvc[sn] = keys
	} else {
		delete(st.bySvc, sn)
	}
	for _, fc := range ps.r.fronts {
		if claims := slices.DeleteFunc(st.fronts[fc.fk], func(c portChain) bool { return c.key == key }); len(claims) > 0 {
			st.fronts[fc.fk] = claims
		} else {
			delete(st.fronts, fc.fk)
		}
	}
	for _, k := range ps.r.nodeports {
		delete(st.nps[k], key)
		if len(st.nps[k]) == 0 {
			delete(st.nps, k)
		}
	}
	for _, a := range ps.r.eps {
		if st.hairpin[a]--; st.hairpin[a] <= 0 {
			delete(st.hairpin, a)
		}
	}
	for _, a := range ps.r.cips {
		if st.cips[a]--; st.cips[a] <= 0 {
			delete(st.cips, a)
		}
	}
}

func svcOf(k spk) svcmodel.ServiceName {
	return svcmodel.ServiceName{Namespace: k.name.Namespace, Name: k.name.Name}
}

// front is the chain frontend element fk goes to ("" for none).
func (st *svcState) front(fk frontKey) string {
	claims := st.fronts[fk]
	if len(claims) == 0 {
		return ""
	}
	return slices.MinFunc(claims, func(a, b portChain) int { return cmpSpk(a.key, b.key) }).chain
}

// npRules are the rules of NodePort k's chain: per family, its
// ServicePort's external chain.
func (st *svcState) npRules(k npKey) []*nftables.Rule {
	claims := st.nps[k]
	keys := slices.SortedFunc(maps.Keys(claims), func(a, b spk) int {
		return cmp.Or(cmp.Compare(claims[a].f, claims[b].f), cmpSpk(a, b))
	})
	var rules []*nftables.Rule
	for _, key := range keys {
		c := claims[key]
		rules = append(rules, &nftables.Rule{
			Exprs:    append(svcFam(c.f).isFamily(), gotoChain(c.chain)),
			UserData: userdata.AppendString(nil, userdata.TypeComment, st.ports[key].sp.Name.String()+" NodePort"),
		})
	}
	return rules
}

// globalSets are the table's own sets and maps, with their elements.
func (st *svcState) globalSets() []setSpec {
	ipsKey4 := nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)
	ipsKey6 := nftables.MustConcatSetType(nftables.TypeIP6Addr, nftables.TypeInetProto, nftables.TypeInetService)
	npKeyT := nftables.MustConcatSetType(nftables.TypeInetProto, nftables.TypeInetService)
	vmap := func(name string, key nftables.SetDatatype) *nftables.Set {
		return &nftables.Set{Name: name, KeyType: key, DataType: nftables.TypeVerdict, IsMap: true}
	}
	ips := map[string][]nftables.SetElement{}
	for _, fk := range slices.SortedFunc(maps.Keys(st.fronts), func(a, b frontKey) int { return cmp.Or(cmp.Compare(a.set, b.set), cmp.Compare(a.key, b.key)) }) {
		ips[fk.set] = append(ips[fk.set], nftables.SetElement{Key: []byte(fk.key), VerdictData: gotoChain(st.front(fk))})
	}
	var nps []nftables.SetElement
	for _, k := range st.npKeys() {
		nps = append(nps, nftables.SetElement{Key: k.elem(), VerdictData: gotoChain(k.chain())})
	}
	var npa, cidrs, scidrs, hp, cips [2][]nftables.SetElement
	// The slot maps' elements, each map's sized first (310,000 slots at
	// 10,000 Services x 4 endpoints: growing them was a fifth of a first
	// sync's allocations).
	var slots [2][svcSlotShards][]nftables.SetElement
	var slotN [2][svcSlotShards]int
	keys := slices.SortedFunc(maps.Keys(st.ports), cmpSpk)
	shards := make([]uint16, len(keys))
	for j, key := range keys {
		ps := st.ports[key]
		shards[j] = uint16(slotShard(ps.sp))
		slotN[famIdxOf(ps.sp.Family)][shards[j]] += slotLen(ps.r.slots)
	}
	for j, key := range keys {
		ps := st.ports[key]
		i, sh := famIdxOf(ps.sp.Family), shards[j]
		if slots[i][sh] == nil {
			slots[i][sh] = make([]nftables.SetElement, 0, slotN[i][sh])
		}
		slots[i][sh] = appendSlotElems(slots[i][sh], ps.r.slots)
	}
	for _, a := range st.snap.NodePortAddrs {
		i := famIdx(a)
		npa[i] = append(npa[i], nftables.SetElement{Key: a.Unmap().AsSlice()})
	}
	for i, v6 := range []bool{false, true} {
		cidrs[i] = prefixIntervals(st.snap.ClusterCIDRs, v6)
		scidrs[i] = prefixIntervals(st.snap.ServiceCIDRs, v6)
	}
	for _, a := range slices.SortedFunc(maps.Keys(st.hairpin), netip.Addr.Compare) {
		i := famIdx(a)
		hp[i] = append(hp[i], nftables.SetElement{Key: hairpinKey(a)})
	}
	for _, a := range slices.SortedFunc(maps.Keys(st.cips), netip.Addr.Compare) {
		i := famIdx(a)
		cips[i] = append(cips[i], nftables.SetElement{Key: a.AsSlice()})
	}
	out := []setSpec{
		{set: sized(vmap(ServiceIPs4, ipsKey4), len(ips[ServiceIPs4])), elems: ips[ServiceIPs4]},
		{set: sized(vmap(ServiceIPs6, ipsKey6), len(ips[ServiceIPs6])), elems: ips[ServiceIPs6]},
		{set: vmap(ServiceNodePorts, npKeyT), elems: nps},
		{set: &nftables.Set{Name: svcNodePortAddrs4, KeyType: nftables.TypeIPAddr}, elems: npa[0]},
		{set: &nftables.Set{Name: svcNodePortAddrs6, KeyType: nftables.TypeIP6Addr}, elems: npa[1]},
		{set: &nftables.Set{Name: svcClusterCIDRs4, KeyType: nftables.TypeIPAddr, Interval: true}, elems: cidrs[0]},
		{set: &nftables.Set{Name: svcClusterCIDRs6, KeyType: nftables.TypeIP6Addr, Interval: true}, elems: cidrs[1]},
		{set: &nftables.Set{Name: svcServiceCIDRs4, KeyType: nftables.TypeIPAddr, Interval: true}, elems: scidrs[0]},
		{set: &nftables.Set{Name: svcServiceCIDRs6, KeyType: nftables.TypeIP6Addr, Interval: true}, elems: scidrs[1]},
		{set: sized(&nftables.Set{Name: svcHairpin4, KeyType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeIPAddr)}, len(hp[0])), elems: hp[0]},
		{set: sized(&nftables.Set{Name: svcHairpin6, KeyType: nftables.MustConcatSetType(nftables.TypeIP6Addr, nftables.TypeIP6Addr)}, len(hp[1])), elems: hp[1]},
		{set: sized(&nftables.Set{Name: svcClusterIPs4, KeyType: nftables.TypeIPAddr}, len(cips[0])), elems: cips[0]},
		{set: sized(&nftables.Set{Name: svcClusterIPs6, KeyType: nftables.TypeIP6Addr}, len(cips[1])), elems: cips[1]},
	}
	for i, f := range []fam{fam4, fam6} {
		for sh := range svcSlotShards {
			// (late: perf of a first sync at 10,000 Services x 4
			// endpoints, 2 shards' maps bound by 40 rules each before
			// their 1,200 elements: the kernel's walks were a quarter of
			// the sync's CPU, nf_tables_bind_check_setelem and
			// nft_hash_walk)
			out = append(out, setSpec{set: sized(slotMap(f, sh), len(slots[i][sh])), elems: slots[i][sh], late: true})
		}
	}
	return out
}

// sized gives s a size for n elements: the kernel then makes a hash
// table of that many buckets at once. Without one it grows a table as
// elements come, and in one transaction it can grow it once only (the
// next growth is left to a worker that runs after it): a first sync of
// 150,000 slots then chains them in long lists, each insert walking one
// (a first sync of 5,000 Services x 4 endpoints took 29 s, 0.8 s with
// one endpoint each). The size is a power of two with room to double,
// 4,096 at least; a set made smaller than it later holds still works.
func sized(s *nftables.Set, n int) *nftables.Set {
	size := uint32(4096)
	for int(size) < 2*n {
		size *= 2
	}
	s.Size = size
	return s
}

// slotMap is f's slot map: slot table ID (two integers) . slot to
// endpoint.
func slotMap(f fam, shard int) *nftables.Set {
	return &nftables.Set{Name: slotMapName(f, shard), KeyType: nftables.MustConcatSetType(nftables.TypeInteger, nftables.TypeInteger, nftables.TypeInteger),
		DataType: f.epType(), IsMap: true}
}

// famIdxOf is f's index (0 IPv4, 1 IPv6).
func famIdxOf(f svcmodel.Family) int {
	if f == svcmodel.IPv4 {
		return 0
	}
	return 1
}

func famIdx(a netip.Addr) int {
	if a.Unmap().Is4() {
		return 0
	}
	return 1
}

// hairpinKey is a's element of the hairpin set: a . a.
func hairpinKey(a netip.Addr) []byte {
	b := a.Unmap().AsSlice()
	return append(append([]byte(nil), b...), b...)
}

func (st *svcState) npKeys() []npKey {
	return slices.SortedFunc(maps.Keys(st.nps), func(a, b npKey) int { return cmp.Or(cmp.Compare(a.proto, b.proto), cmp.Compare(a.port, b.port)) })
}

// baseChains are the hooked chains and the services chain.
func (s *Services) baseChains() []chainSpec {
	c := func(what string) []byte { return userdata.AppendString(nil, userdata.TypeComment, svcLabel+": "+what) }
	jump := []*nftables.Rule{svcRule(c("Services"), &expr.Verdict{Kind: expr.VerdictJump, Chain: svcChainServices})}
	var services []*nftables.Rule
	for _, f := range []fam{fam4, fam6} {
		services = append(services, svcRule(c("frontends "+f.ips),
			append(f.isFamily(), f.load(true, regEP), &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: f.portReg()},
				thPort(true, f.portReg()+1),
				&expr.Lookup{SourceRegister: regEP, SetName: f.ips, IsDestRegSet: true, DestRegister: 0})...))
	}
	for _, f := range []fam{fam4, fam6} {
		services = append(services, svcRule(c("NodePorts on @"+f.npAddrs),
			append(f.isFamily(), f.load(true, 1), &expr.Lookup{SourceRegister: 1, SetName: f.npAddrs},
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: regEP}, thPort(true, regEP+1),
				&expr.Lookup{SourceRegister: regEP, SetName: ServiceNodePorts, IsDestRegSet: true, DestRegister: 0})...))
	}
	m := s.opts.MasqMark
	post := []*nftables.Rule{svcRule(c("marked: masquerade"),
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(m), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(^m), Xor: make([]byte, 4)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1},
		&expr.Masq{})}
	for _, f := range []fam{fam4, fam6} {
		post = append(post, svcRule(c("hairpin: masquerade"),
			append(append(ctStatusDNAT(), f.isFamily()...),
				f.load(false, regEP), f.load(true, regEP+f.alen/4),
				&expr.Lookup{SourceRegister: regEP, SetName: f.hairpin},
				&expr.Masq{})...))
	}
	return append([]chainSpec{
		baseChain("prerouting", nftables.ChainTypeNAT, *nftables.ChainHookPrerouting, *nftables.ChainPriorityNATDest, jump),
		baseChain("output", nftables.ChainTypeNAT, *nftables.ChainHookOutput, *nftables.ChainPriorityNATDest, jump),
		baseChain("postrouting", nftables.ChainTypeNAT, *nftables.ChainHookPostrouting, *nftables.ChainPriorityNATSource, post),
		{name: svcChainServices, rules: services},
	}, clusterIPsCheck(c)...)
}

// spec is the whole table as st renders it.
func (st *svcState) spec(s *Services) *tableSpec {
	ts := &tableSpec{table: svcTable(), owned: true, what: "the services table", sets: st.globalSets(), chains: s.baseChains()}
	for _, k := range st.npKeys() {
		ts.chains = append(ts.chains, chainSpec{name: k.chain(), rules: st.npRules(k)})
	}
	for _, key := range slices.SortedFunc(maps.Keys(st.ports), cmpSpk) {
		r := st.ports[key].r
		ts.sets = append(ts.sets, r.sets...)
		ts.chains = append(ts.chains, r.chains...)
	}
	return ts
}

// chosen are a ServicePort's endpoints (cluster and local).
func chosen(sp *svcmodel.ServicePort) map[netip.AddrPort]bool {
	out := map[netip.AddrPort]bool{}
	for _, eps := range [][]svcmodel.Endpoint{sp.ClusterEndpoints, sp.LocalEndpoints} {
		for _, e := range eps {
			out[netip.AddrPortFrom(e.Addr.Unmap(), e.Port)] = true
		}
	}
	return out
}

// goneUDP are the endpoints of st's UDP and SCTP ServicePorts that next
// no longer has for them.
func (st *svcState) goneUDP(next *svcState) []netip.AddrPort {
	var gone []netip.AddrPort
	for key, ps := range st.ports {
		gone = append(gone, goneOf(ps.sp, next.ports[key])...)
	}
	slices.SortFunc(gone, netip.AddrPort.Compare)
	return slices.Compact(gone)
}

// goneOf are the endpoints of old (UDP or SCTP) that next (nil: gone) no
// longer has.
func goneOf(old *svcmodel.ServicePort, next *spState) []netip.AddrPort {
	if old.Protocol == svcmodel.TCP {
		return nil
	}
	now := map[netip.AddrPort]bool{}
	if next != nil {
		now = chosen(next.sp)
	}
	var gone []netip.AddrPort
	for ap := range chosen(old) {
		if !now[ap] {
			gone = append(gone, ap)
		}
	}
	return gone
}
