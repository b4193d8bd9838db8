package nft

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/internal/svcmodel"
)

// The services table's rendering of one ServicePort (services.go draws
// the table): its chains, sets and the frontend elements that lead to
// them.

// Registers of the per-ServicePort chains (32-bit ones, NFT_REG32_xx):
// the endpoint (address . port) is loaded at regEP (the port after the
// address), the client's address at regClient and its port after it, the
// hash at regHash; NFT_REG_1 (8..11) is regEP's space, so scratch loads go
// to register 1 only before the endpoint is.
const (
	regEP     = 8  // NFT_REG32_00
	regClient = 16 // NFT_REG32_08
	regHash   = 21 // NFT_REG32_13
	// regSlotKey: a slot map's key, table ID . slot (the hash), loaded
	// over the client's address once it was hashed (and recorded).
	regSlotKey = 19 // NFT_REG32_11
)

// slotShard is the slot map that holds sp's slots, in sp's shard table.
func slotShard(sp *svcmodel.ServicePort) int {
	id := slotTableID(sp, "")
	return (int(id[0])<<8 | int(id[1])) % svcSlotMaps
}

func slotMapName(f fam, shard int) string {
	const hex = "0123456789abcdef"
	return f.slots + string([]byte{hex[shard>>8&0xf], hex[shard>>4&0xf], hex[shard&0xf]}) // (%03x)
}

// slotTableID is the ID of a ServicePort's slot table for traffic of tag.
func slotTableID(sp *svcmodel.ServicePort, tag string) []byte {
	h := sha256.Sum256([]byte(spKey(sp).String() + "/" + tag))
	return h[:8]
}

// svcHashSeed is the jhash seed: fixed, so that every node hashes a flow
// to the same slot.
const svcHashSeed = 0x63626f78

// fam is what differs between the families.
type fam struct {
	f                   svcmodel.Family
	nfproto             byte
	alen                uint32 // address length
	saddr, daddr        uint32 // offsets in the network header
	ips, npAddrs, cidrs string
	hairpin             string
	suffix              string
	slots               string
}

// fam4 and fam6 are plain data (no init code in a package every CNI call
// links: TestNoInitCode); their address type is addrType's.
var fam4 = fam{svcmodel.IPv4, unix.NFPROTO_IPV4, 4, 12, 16,
	ServiceIPs4, svcNodePortAddrs4, svcClusterCIDRs4, svcHairpin4, "4", svcSlots4}

var fam6 = fam{svcmodel.IPv6, unix.NFPROTO_IPV6, 16, 8, 24,
	ServiceIPs6, svcNodePortAddrs6, svcClusterCIDRs6, svcHairpin6, "6", svcSlots6}

// addrType is the family's address type of sets.
func (f fam) addrType() nftables.SetDatatype {
	if f.alen == 16 {
		return nftables.TypeIP6Addr
	}
	return nftables.TypeIPAddr
}

func svcFam(f svcmodel.Family) fam {
	if f == svcmodel.IPv6 {
		return fam6
	}
	return fam4
}

// portReg is the register of the endpoint's port (after its address).
func (f fam) portReg() uint32 { return regEP + f.alen/4 }

// epType is the type of an endpoint: address . port.
func (f fam) epType() nftables.SetDatatype {
	return nftables.MustConcatSetType(f.addrType(), nftables.TypeInetService)
}

// isFamily is `meta nfproto <f>`.
func (f fam) isFamily() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{f.nfproto}},
	}
}

// load loads the source (or destination) address to reg.
func (f fam) load(dst bool, reg uint32) *expr.Payload {
	off := f.saddr
	if dst {
		off = f.daddr
	}
	return &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: f.alen}
}

// thPort loads the transport header's source or destination port to reg.
func thPort(dst bool, reg uint32) *expr.Payload {
	off := uint32(0)
	if dst {
		off = 2
	}
	return &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseTransportHeader, Offset: off, Len: 2}
}

// protoNum is p's IP protocol number.
func protoNum(p svcmodel.Proto) byte {
	switch p {
	case svcmodel.UDP:
		return unix.IPPROTO_UDP
	case svcmodel.SCTP:
		return unix.IPPROTO_SCTP
	}
	return unix.IPPROTO_TCP
}

// spk identifies a ServicePort in the table's state.
type spk struct {
	name  svcmodel.PortName
	proto svcmodel.Proto
	fam   svcmodel.Family
}

// String is namespace/name:port/proto/family ("%s/%s/%d" of its fields,
// written without fmt: a first sync hashes it twice a ServicePort).
func (k spk) String() string {
	return k.name.Namespace + "/" + k.name.Name + ":" + k.name.Port + "/" + string(k.proto) + "/" + strconv.Itoa(int(k.fam))
}

func spKey(sp *svcmodel.ServicePort) spk { return spk{sp.Name, sp.Protocol, sp.Family} }

func cmpSpk(a, b spk) int {
	return cmp.Or(cmp.Compare(a.name.Namespace, b.name.Namespace), cmp.Compare(a.name.Name, b.name.Name),
		cmp.Compare(a.name.Port, b.name.Port), cmp.Compare(a.proto, b.proto), cmp.Compare(a.fam, b.fam))
}

// spID is the short name of a ServicePort's objects: 13 characters of
// base32 of a SHA-256 of its key (kube-proxy's servicePortChainName
// shape).
func spID(sp *svcmodel.ServicePort) string {
	h := sha256.Sum256([]byte(spKey(sp).String()))
	return strings.ToLower(base32.StdEncoding.EncodeToString(h[:])[:13])
}

// frontKey is one frontend element: its map and key.
type frontKey struct{ set, key string }

// frontClaim is a frontend element a ServicePort wants.
type frontClaim struct {
	fk    frontKey
	chain string
}

// npKey is a NodePort: the key of service-nodeports.
type npKey struct {
	proto byte
	port  uint16
}

func (k npKey) chain() string { return fmt.Sprintf("np-%d-%d", k.proto, k.port) }

func (k npKey) elem() []byte { return []byte{k.proto, 0, 0, 0, byte(k.port >> 8), byte(k.port), 0, 0} }

// spRender is one ServicePort's part of the table.
type spRender struct {
	chains    []chainSpec
	sets      []setSpec
	fronts    []frontClaim
	nodeports []npKey      // served by ext (family sp.Family)
	ext       string       // the external chain, "" without external frontends
	eps       []netip.Addr // its endpoints' addresses (hairpin)
	cips      []netip.Addr // its ClusterIPs (cluster-ips4/6)
	// slots are its slot tables, whose slots are its elements of the
	// family's slot map (slotElems).
	slots []slotTable
}

// hooks reports whether the ServicePort has a frontend or a NodePort
// element (its shard then needs its base chains).
func (o *spRender) hooks() bool { return len(o.fronts)+len(o.nodeports) > 0 }

// slotTable is one slot table of a ServicePort, kept compact: a table of
// 10,000 Services x 4 endpoints has 310,000 slots, which held as
// nftables.SetElements took 49 MiB of the agent's heap (a heap profile
// of the rendering), as indexes 1.2 MiB.
type slotTable struct {
	tid  []byte   // its ID, the first part of each slot's key
	data [][]byte // each endpoint's element data
	idx  []int32  // each slot's endpoint, an index of data
}

// slotElems are ts's elements of the slot map.
func slotElems(ts []slotTable) []nftables.SetElement {
	return appendSlotElems(make([]nftables.SetElement, 0, slotLen(ts)), ts)
}

// slotLen is how many slots ts have.
func slotLen(ts []slotTable) int {
	n := 0
	for _, t := range ts {
		n += len(t.idx)
	}
	return n
}

// appendSlotElems appends ts's elements of the slot map to out, their
// keys (table ID . slot) cut from one array per table: a first sync
// makes 310,000 of them at 10,000 Services x 4 endpoints.
func appendSlotElems(out []nftables.SetElement, ts []slotTable) []nftables.SetElement {
	for _, t := range ts {
		kl := len(t.tid) + 4
		keys := make([]byte, kl*len(t.idx))
		for i, ep := range t.idx {
			key := keys[i*kl : (i+1)*kl : (i+1)*kl]
			copy(key, t.tid)
			binary.NativeEndian.PutUint32(key[len(t.tid):], uint32(i))
			out = append(out, nftables.SetElement{Key: key, Val: t.data[ep]})
		}
	}
	return out
}

// addSet adds ss unless a set of its name is there (two chains of one
// ServicePort may choose among the same endpoints).
func (o *spRender) addSet(ss setSpec) {
	for _, have := range o.sets {
		if have.set.Name == ss.set.Name {
			return
		}
	}
	o.sets = append(o.sets, ss)
}

// renderer renders ServicePorts for one table.
type renderer struct {
	mark    uint32
	hasCIDR map[svcmodel.Family]bool
}

// comment is a rule's comment: the ServicePort and what the rule does.
func comment(sp *svcmodel.ServicePort, what string) []byte {
	// (without fmt: a first sync writes 20,000 of them at 10,000 Services)
	return userdata.AppendString(nil, userdata.TypeComment,
		sp.Name.Namespace+"/"+sp.Name.Name+":"+sp.Name.Port+" "+string(sp.Protocol)+"/"+svcFam(sp.Family).suffix+": "+what)
}

func svcRule(c []byte, exprs ...expr.Any) *nftables.Rule {
	return &nftables.Rule{Exprs: exprs, UserData: c}
}

// markMasq sets the masquerade bit.
func (r *renderer) markMasq() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(^r.mark), Xor: binaryutil.NativeEndian.PutUint32(r.mark)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1},
	}
}

func gotoChain(name string) *expr.Verdict { return &expr.Verdict{Kind: expr.VerdictGoto, Chain: name} }

// render renders sp.
func (r *renderer) render(sp *svcmodel.ServicePort) spRender {
	f := svcFam(sp.Family)
	id := spID(sp)
	var out spRender
	internal, external := sp.ClusterEndpoints, sp.ClusterEndpoints
	if sp.InternalLocal {
		internal = sp.LocalEndpoints
	}
	if sp.ExternalLocal {
		external = sp.LocalEndpoints
	}
	var hasInternal, hasExternal, hasLB bool
	for _, fe := range sp.Frontends {
		switch fe.Kind {
		case svcmodel.ClusterIP:
			hasInternal = true
		case svcmodel.LoadBalancer:
			hasLB = true
			hasExternal = true
		default:
			hasExternal = true
		}
	}
	svc, ext, lb, epc := "svc-"+id, "ext-"+id, "lb-"+id, "epc-"+id
	internalTag := "c"
	if sp.InternalLocal {
		internalTag = "l"
	}
	// The internal chain (also the cluster endpoints' when internal
	// traffic is of the Cluster policy).
	if hasInternal || (hasExternal && !sp.InternalLocal) {
		var rules []*nftables.Rule
		if r.hasCIDR[sp.Family] {
			rules = append(rules, svcRule(comment(sp, "from outside the cluster: masquerade"),
				append([]expr.Any{f.load(false, 1), &expr.Lookup{SourceRegister: 1, SetName: f.cidrs, Invert: true}}, r.markMasq()...)...))
		}
		rules = append(rules, r.endpoints(sp, f, internalTag, id, sortedEps(internal), &out)...)
		out.chains = append(out.chains, chainSpec{name: svc, rules: rules})
	}
	if hasExternal {
		cluster := svc
		if sp.InternalLocal {
			cluster = epc
			out.chains = append(out.chains, chainSpec{name: epc, rules: r.endpoints(sp, f, "c", id, sortedEps(sp.ClusterEndpoints), &out)})
		}
		var rules []*nftables.Rule
		if !sp.ExternalLocal {
			rules = append(rules, svcRule(comment(sp, "external, policy Cluster: masquerade"), append(r.markMasq(), gotoChain(cluster))...))
		} else {
			if r.hasCIDR[sp.Family] {
				rules = append(rules, svcRule(comment(sp, "external from a pod: policy Cluster"),
					f.load(false, 1), &expr.Lookup{SourceRegister: 1, SetName: f.cidrs}, gotoChain(cluster)))
			}
			rules = append(rules, svcRule(comment(sp, "external from the node: masquerade, policy Cluster"),
				append([]expr.Any{
					&expr.Fib{Register: 1, FlagSADDR: true, ResultADDRTYPE: true},
					&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)},
				}, append(r.markMasq(), gotoChain(cluster))...)...))
			rules = append(rules, r.endpoints(sp, f, "l", id, sortedEps(external), &out)...)
		}
		out.chains = append(out.chains, chainSpec{name: ext, rules: rules})
		out.ext = ext
	}
	lbChain := ext
	if hasLB && len(sp.SourceRanges) > 0 {
		lbChain = lb
		src := "src-" + id
		allowed := append([]netip.Prefix(nil), sp.SourceRanges...)
		for _, fe := range sp.Frontends {
			if fe.Kind == svcmodel.LoadBalancer {
				allowed = append(allowed, netip.PrefixFrom(fe.Addr, fe.Addr.BitLen())) // the VIP itself (hairpin)
			}
		}
		out.sets = append(out.sets, setSpec{set: &nftables.Set{Name: src, KeyType: f.addrType(), Interval: true},
			elems: prefixIntervals(allowed, sp.Family == svcmodel.IPv6)})
		out.chains = append(out.chains, chainSpec{name: lb, rules: []*nftables.Rule{
			svcRule(comment(sp, "loadBalancerSourceRanges: others dropped"),
				f.load(false, 1), &expr.Lookup{SourceRegister: 1, SetName: src, Invert: true}, &expr.Verdict{Kind: expr.VerdictDrop}),
			svcRule(comment(sp, "loadBalancerSourceRanges: allowed"), gotoChain(ext)),
		}})
	}
	proto := protoNum(sp.Protocol)
	for _, fe := range sp.Frontends {
		switch fe.Kind {
		case svcmodel.NodePort:
			out.nodeports = append(out.nodeports, npKey{proto, fe.Port})
		case svcmodel.ClusterIP:
			out.fronts = append(out.fronts, frontClaim{frontKey{f.ips, string(frontElem(fe.Addr, proto, fe.Port))}, svc})
			if a := fe.Addr.Unmap(); !slices.Contains(out.cips, a) {
				out.cips = append(out.cips, a)
			}
		case svcmodel.LoadBalancer:
			out.fronts = append(out.fronts, frontClaim{frontKey{f.ips, string(frontElem(fe.Addr, proto, fe.Port))}, lbChain})
		default:
			out.fronts = append(out.fronts, frontClaim{frontKey{f.ips, string(frontElem(fe.Addr, proto, fe.Port))}, ext})
		}
	}
	seen := map[netip.Addr]bool{}
	for _, eps := range [][]svcmodel.Endpoint{sp.ClusterEndpoints, sp.LocalEndpoints} {
		for _, e := range eps {
			if a := e.Addr.Unmap(); !seen[a] {
				seen[a] = true
				out.eps = append(out.eps, a)
			}
		}
	}
	return out
}

// frontElem is the key of service-ips4/6: address . protocol . port.
func frontElem(a netip.Addr, proto byte, port uint16) []byte {
	k := append([]byte(nil), a.Unmap().AsSlice()...)
	return append(k, proto, 0, 0, 0, byte(port>>8), byte(port), 0, 0)
}

// epData is a slot map's value: address . port.
func epData(e svcmodel.Endpoint) []byte {
	return append(append([]byte(nil), e.Addr.Unmap().AsSlice()...), byte(e.Port>>8), byte(e.Port), 0, 0)
}

// endpoints renders the rules that choose among eps (sorted) for traffic
// of set tag ("c" cluster, "l" local) and DNAT to it, adding the sets
// they use to out.
func (r *renderer) endpoints(sp *svcmodel.ServicePort, f fam, tag, id string, eps []svcmodel.Endpoint, out *spRender) []*nftables.Rule {
	if len(eps) == 0 {
		if !sp.HasEndpoints {
			rej := &expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_PORT_UNREACH}
			if sp.Protocol == svcmodel.TCP {
				rej = &expr.Reject{Type: unix.NFT_REJECT_TCP_RST}
			}
			return []*nftables.Rule{svcRule(comment(sp, "no endpoints: reject"), rej)}
		}
		return []*nftables.Rule{svcRule(comment(sp, "no endpoint for this traffic: drop"), &expr.Verdict{Kind: expr.VerdictDrop})}
	}
	natTo := &expr.NAT{Type: expr.NATTypeDestNAT, Family: uint32(f.nfproto), RegAddrMin: regEP, RegProtoMin: f.portReg(), Specified: true}
	if len(eps) == 1 && sp.AffinityTimeout == 0 {
		return []*nftables.Rule{svcRule(comment(sp, "endpoint "+eps[0].String()),
			&expr.Immediate{Register: regEP, Data: eps[0].Addr.Unmap().AsSlice()},
			&expr.Immediate{Register: f.portReg(), Data: be16(eps[0].Port)},
			natTo)}
	}
	m := slotCount(len(eps))
	slots := maglev(eps, m)
	// The slots are elements of one of the family's slot maps (a shard),
	// keyed by the slot table's ID (64 bits of a hash of the ServicePort
	// and tag) and the slot (svcSlotShards says why).
	tid := slotTableID(sp, tag)
	if !slices.ContainsFunc(out.slots, func(t slotTable) bool { return bytes.Equal(t.tid, tid) }) {
		t := slotTable{tid: tid, data: make([][]byte, len(eps)), idx: make([]int32, len(slots))}
		for i, e := range eps {
			t.data[i] = epData(e)
		}
		for i, ep := range slots {
			t.idx[i] = int32(ep)
		}
		out.slots = append(out.slots, t)
	}
	toSlot := []expr.Any{
		&expr.Immediate{Register: regSlotKey, Data: tid[:4]},
		&expr.Immediate{Register: regSlotKey + 1, Data: tid[4:]},
		&expr.Lookup{SourceRegister: regSlotKey, SetName: slotMapName(f, slotShard(sp)), IsDestRegSet: true, DestRegister: regEP},
		natTo,
	}
	// (not how many: an endpoint that comes or goes then changes the
	// slot map's elements only, not the rule, whose rewrite makes the
	// kernel validate the whole table: 128 ms at 30,000 Services)
	what := "endpoints by slot"
	if sp.AffinityTimeout == 0 {
		return []*nftables.Rule{svcRule(comment(sp, what), append([]expr.Any{
			f.load(false, regClient), thPort(false, regClient+f.alen/4),
			&expr.Hash{SourceRegister: regClient, DestRegister: regHash, Length: f.alen + 4, Modulus: uint32(m), Seed: svcHashSeed, Type: expr.HashTypeJenkins},
		}, toSlot...)...)}
	}
	// Session affinity: the client's slot, kept in af-x-ID for the
	// timeout (each new connection renews it), then the slot's endpoint.
	// A client without an entry (new, or its entry expired) gets a new
	// choice, its address and port hashed as without affinity: kube-proxy
	// chooses afresh then too, and a hash of the address alone would send
	// a client back to the same endpoint after every expiry (the spec
	// "should have session affinity timeout work").
	// (nft 1.0.6 aborts listing the first rule, a lookup keyed by
	// another map's value: its parser's bug, the kernel runs it.)
	af := "af-" + tag + "-" + id
	out.addSet(setSpec{set: &nftables.Set{Name: af, KeyType: f.addrType(), DataType: nftables.TypeInteger, IsMap: true,
		HasTimeout: true, Dynamic: true, Timeout: sp.AffinityTimeout}, kept: true})
	update := &expr.Dynset{SrcRegKey: regClient, SrcRegData: regHash, SetName: af, Operation: uint32(unix.NFT_DYNSET_OP_UPDATE),
		Timeout: sp.AffinityTimeout.Truncate(time.Millisecond)}
	return []*nftables.Rule{
		svcRule(comment(sp, "sessionAffinity ClientIP: the client's slot"), append([]expr.Any{
			f.load(false, regClient), &expr.Lookup{SourceRegister: regClient, SetName: af, IsDestRegSet: true, DestRegister: regHash},
			update}, toSlot...)...),
		svcRule(comment(sp, "sessionAffinity ClientIP: a slot for the client"), append([]expr.Any{
			f.load(false, regClient), thPort(false, regClient+f.alen/4),
			&expr.Hash{SourceRegister: regClient, DestRegister: regHash, Length: f.alen + 4, Modulus: uint32(m), Seed: svcHashSeed, Type: expr.HashTypeJenkins},
			update}, toSlot...)...),
	}
}
