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
	// hooked: each shard's count of ServicePorts with a frontend or a
	// NodePort; only a shard with one has its base chains (shardChains).
	hooked [svcShards]int
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
	st := newSvcState(snap, r)
	for p := range snap.All() {
		sp := *p
		st.claim(spKey(&sp), &spState{sp: &sp, r: r.render(&sp)})
	}
	return st
}

// newSvcState is an empty state of snap for r's renderings.
func newSvcState(snap *svcmodel.Snapshot, r *renderer) *svcState {
	return &svcState{snap: snap, hasCIDR: r.hasCIDR, ports: map[spk]*spState{},
		fronts: map[frontKey][]portChain{}, nps: map[npKey]map[spk]npClaim{}, hairpin: map[netip.Addr]int{},
		cips: map[netip.Addr]int{}, bySvc: map[svcmodel.ServiceName][]spk{}}
}

// claim adds a ServicePort's state and its claims.
func (st *svcState) claim(key spk, ps *spState) {
	st.ports[key] = ps
	sn := svcOf(key)
	st.bySvc[sn] = append(st.bySvc[sn], key)
	if ps.r.hooks() {
		st.hooked[shardOfKey(key)]++
	}
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
	if ps.r.hooks() {
		st.hooked[shardOfKey(key)]--
	}
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

// front is the chain frontend element fk goes to ("" for none) and the
// shard of the ServicePort that has it (its element's table; -1 for
// none).
func (st *svcState) front(fk frontKey) (int, string) {
	claims := st.fronts[fk]
	if len(claims) == 0 {
		return -1, ""
	}
	c := slices.MinFunc(claims, func(a, b portChain) int { return cmpSpk(a.key, b.key) })
	return shardOfKey(c.key), c.chain
}

// np is NodePort k's shard (its first claim's: -1 for none) and the
// rules of its chain there: per family, its ServicePort's external
// chain (claims of other shards, two Services with one NodePort, are
// left out).
func (st *svcState) np(k npKey) (int, []*nftables.Rule) {
	claims := st.nps[k]
	if len(claims) == 0 {
		return -1, nil
	}
	shard := shardOfKey(slices.MinFunc(slices.Collect(maps.Keys(claims)), cmpSpk))
	keys := slices.SortedFunc(maps.Keys(claims), func(a, b spk) int {
		return cmp.Or(cmp.Compare(claims[a].f, claims[b].f), cmpSpk(a, b))
	})
	var rules []*nftables.Rule
	for _, key := range keys {
		if shardOfKey(key) != shard {
			continue
		}
		c := claims[key]
		rules = append(rules, &nftables.Rule{
			Exprs:    append(svcFam(c.f).isFamily(), gotoChain(c.chain)),
			UserData: userdata.AppendString(nil, userdata.TypeComment, st.ports[key].sp.Name.String()+" NodePort"),
		})
	}
	return shard, rules
}

// mainSets are the main table's sets, with their elements.
func (st *svcState) mainSets() []setSpec {
	// (sized first: grown by append, the 120,000 endpoints of 30,000
	// Services allocated 60 MB here at each full sync and periodic check)
	var hp, cips [2][]nftables.SetElement
	var nhp, ncips [2]int
	for a := range st.hairpin {
		nhp[famIdx(a)]++
	}
	for a := range st.cips {
		ncips[famIdx(a)]++
	}
	for i := range 2 {
		hp[i], cips[i] = make([]nftables.SetElement, 0, nhp[i]), make([]nftables.SetElement, 0, ncips[i])
	}
	for _, a := range slices.SortedFunc(maps.Keys(st.hairpin), netip.Addr.Compare) {
		i := famIdx(a)
		hp[i] = append(hp[i], nftables.SetElement{Key: hairpinKey(a)})
	}
	for _, a := range slices.SortedFunc(maps.Keys(st.cips), netip.Addr.Compare) {
		i := famIdx(a)
		cips[i] = append(cips[i], nftables.SetElement{Key: a.AsSlice()})
	}
	return append(serviceCIDRSets(st.snap),
		setSpec{set: sized(&nftables.Set{Name: svcHairpin4, KeyType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeIPAddr)}, len(hp[0])), elems: hp[0]},
		setSpec{set: sized(&nftables.Set{Name: svcHairpin6, KeyType: nftables.MustConcatSetType(nftables.TypeIP6Addr, nftables.TypeIP6Addr)}, len(hp[1])), elems: hp[1]},
		setSpec{set: sized(&nftables.Set{Name: svcClusterIPs4, KeyType: nftables.TypeIPAddr}, len(cips[0])), elems: cips[0]},
		setSpec{set: sized(&nftables.Set{Name: svcClusterIPs6, KeyType: nftables.TypeIP6Addr}, len(cips[1])), elems: cips[1]},
	)
}

// serviceCIDRSets are the Service ranges' sets of snap (main table).
func serviceCIDRSets(snap *svcmodel.Snapshot) []setSpec {
	return []setSpec{
		{set: &nftables.Set{Name: svcServiceCIDRs4, KeyType: nftables.TypeIPAddr, Interval: true}, elems: prefixIntervals(snap.ServiceCIDRs, false)},
		{set: &nftables.Set{Name: svcServiceCIDRs6, KeyType: nftables.TypeIP6Addr, Interval: true}, elems: prefixIntervals(snap.ServiceCIDRs, true)},
	}
}

// shardGlobals are the sets every shard has alike (the NodePort
// addresses, the cluster's networks), with their elements, of snap.
func shardGlobals(snap *svcmodel.Snapshot) []setSpec {
	var npa, cidrs [2][]nftables.SetElement
	for _, a := range snap.NodePortAddrs {
		i := famIdx(a)
		npa[i] = append(npa[i], nftables.SetElement{Key: a.Unmap().AsSlice()})
	}
	for i, v6 := range []bool{false, true} {
		cidrs[i] = prefixIntervals(snap.ClusterCIDRs, v6)
	}
	return []setSpec{
		{set: &nftables.Set{Name: svcNodePortAddrs4, KeyType: nftables.TypeIPAddr}, elems: npa[0]},
		{set: &nftables.Set{Name: svcNodePortAddrs6, KeyType: nftables.TypeIP6Addr}, elems: npa[1]},
		{set: &nftables.Set{Name: svcClusterCIDRs4, KeyType: nftables.TypeIPAddr, Interval: true}, elems: cidrs[0]},
		{set: &nftables.Set{Name: svcClusterCIDRs6, KeyType: nftables.TypeIP6Addr, Interval: true}, elems: cidrs[1]},
	}
}

// shardSets are each shard's own sets and maps, with their elements:
// the frontend maps, the slot maps and shardGlobals; with only >= 0,
// shard only's alone (the others' left empty).
func (st *svcState) shardSets(only int) [svcShards][]setSpec {
	skip := func(sh int) bool { return only >= 0 && sh != only }
	ipsKey4 := nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)
	ipsKey6 := nftables.MustConcatSetType(nftables.TypeIP6Addr, nftables.TypeInetProto, nftables.TypeInetService)
	npKeyT := nftables.MustConcatSetType(nftables.TypeInetProto, nftables.TypeInetService)
	vmap := func(name string, key nftables.SetDatatype) *nftables.Set {
		return &nftables.Set{Name: name, KeyType: key, DataType: nftables.TypeVerdict, IsMap: true}
	}
	var ips [svcShards]map[string][]nftables.SetElement
	for _, fk := range slices.SortedFunc(maps.Keys(st.fronts), func(a, b frontKey) int { return cmp.Or(cmp.Compare(a.set, b.set), cmp.Compare(a.key, b.key)) }) {
		sh, chain := st.front(fk)
		if skip(sh) {
			continue
		}
		if ips[sh] == nil {
			ips[sh] = map[string][]nftables.SetElement{}
		}
		ips[sh][fk.set] = append(ips[sh][fk.set], nftables.SetElement{Key: []byte(fk.key), VerdictData: gotoChain(chain)})
	}
	var nps [svcShards][]nftables.SetElement
	for _, k := range st.npKeys() {
		sh, _ := st.np(k)
		if skip(sh) {
			continue
		}
		nps[sh] = append(nps[sh], nftables.SetElement{Key: k.elem(), VerdictData: gotoChain(k.chain())})
	}
	// The slot maps' elements, each map's sized first (310,000 slots at
	// 10,000 Services x 4 endpoints: growing them was a fifth of a first
	// sync's allocations).
	var slots [svcShards][2][svcSlotMaps][]nftables.SetElement
	var slotN [svcShards][2][svcSlotMaps]int
	keys := slices.SortedFunc(maps.Keys(st.ports), cmpSpk)
	where := make([][2]uint16, len(keys)) // shard table, slot map
	for j, key := range keys {
		ps := st.ports[key]
		where[j] = [2]uint16{uint16(shardOfKey(key)), uint16(slotShard(ps.sp))}
		slotN[where[j][0]][famIdxOf(ps.sp.Family)][where[j][1]] += slotLen(ps.r.slots)
	}
	for j, key := range keys {
		ps := st.ports[key]
		t, i, sh := where[j][0], famIdxOf(ps.sp.Family), where[j][1]
		if skip(int(t)) {
			continue
		}
		if slots[t][i][sh] == nil {
			slots[t][i][sh] = make([]nftables.SetElement, 0, slotN[t][i][sh])
		}
		slots[t][i][sh] = appendSlotElems(slots[t][i][sh], ps.r.slots)
	}
	globals := shardGlobals(st.snap)
	var out [svcShards][]setSpec
	for t := range svcShards {
		if skip(t) {
			continue
		}
		out[t] = append([]setSpec{
			{set: sized(vmap(ServiceIPs4, ipsKey4), len(ips[t][ServiceIPs4])), elems: ips[t][ServiceIPs4]},
			{set: sized(vmap(ServiceIPs6, ipsKey6), len(ips[t][ServiceIPs6])), elems: ips[t][ServiceIPs6]},
			{set: vmap(ServiceNodePorts, npKeyT), elems: nps[t]},
		}, globals...)
		for i, f := range []fam{fam4, fam6} {
			for sh := range svcSlotMaps {
				// (late: perf of a first sync at 10,000 Services x 4
				// endpoints, 2 shards' maps bound by 40 rules each before
				// their 1,200 elements: the kernel's walks were a quarter of
				// the sync's CPU, nf_tables_bind_check_setelem and
				// nft_hash_walk)
				out[t] = append(out[t], setSpec{set: sized(slotMap(f, sh), len(slots[t][i][sh])), elems: slots[t][i][sh], late: true})
			}
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

// svcComment is a table rule's comment.
func svcComment(what string) []byte {
	return userdata.AppendString(nil, userdata.TypeComment, svcLabel+": "+what)
}

// shardChains are a shard's hooked chains and its services chain.
// shardChains are a shard's chains: its Services chain, and with hooked
// (a ServicePort of the shard has a frontend or a NodePort) the base
// chains that jump to it. A shard without is not hooked at all: every
// new connection (and on vxlan every new outer flow) walks each hooked
// shard's nat chains, 16 of them when all were (docs/benchmarks.md, the
// profile of the connection-rate row).
func shardChains(hooked bool) []chainSpec {
	c := svcComment
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
	chains := []chainSpec{{name: svcChainServices, rules: services}}
	if hooked {
		chains = append(chains,
			baseChain("prerouting", nftables.ChainTypeNAT, *nftables.ChainHookPrerouting, *nftables.ChainPriorityNATDest, jump),
			baseChain("output", nftables.ChainTypeNAT, *nftables.ChainHookOutput, *nftables.ChainPriorityNATDest, jump))
	}
	return chains
}

// mainChains are the main table's chains: postrouting's masquerade and
// the Service range's check.
func (s *Services) mainChains() []chainSpec {
	c := svcComment
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
		baseChain("postrouting", nftables.ChainTypeNAT, *nftables.ChainHookPostrouting, *nftables.ChainPriorityNATSource, post),
	}, clusterIPsCheck(c)...)
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
