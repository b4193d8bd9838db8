package nft

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/internal/svcmodel"
	"github.com/cnibox/cnibox/netops/nft/nftfake"
)

// The services table traced without a kernel: the table as the fake
// kernel holds it after Apply (rules and elements read back), walked for
// a connection's first packet, so that what a frontend leads to is
// checked against the snapshot's semantics as a normal user.

// svcDump is one services table read back from a kernel: the main
// table's, with its shards' (in order) in shards.
type svcDump struct {
	chains map[string][]*nftables.Rule
	sets   map[string]*nftables.Set
	elems  map[string][]nftables.SetElement
	shards []*svcDump
}

func dumpSvc(t *testing.T, h *Handle, c *nftables.Conn) *svcDump {
	t.Helper()
	names := ServicesTables()
	d := dumpSvcTable(t, h, c, names[0])
	for _, n := range names[1:] {
		d.shards = append(d.shards, dumpSvcTable(t, h, c, n))
	}
	return d
}

func dumpSvcTable(t *testing.T, h *Handle, c *nftables.Conn, name string) *svcDump {
	t.Helper()
	d := &svcDump{chains: map[string][]*nftables.Rule{}, sets: map[string]*nftables.Set{}, elems: map[string][]nftables.SetElement{}}
	tb := &nftables.Table{Name: name, Family: nftables.TableFamilyINet}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range chains {
		if ch.Table.Name != name {
			continue
		}
		rules, err := c.GetRules(tb, ch)
		if err != nil {
			t.Fatal(err)
		}
		d.chains[ch.Name] = rules
	}
	sets, err := c.GetSets(tb)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sets {
		d.sets[s.Name] = s
		el, err := h.dumpFamilyElems(nftables.TableFamilyINet, name, s.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range el {
			se := nftables.SetElement{Key: e.key, Val: e.data, IntervalEnd: e.intervalEnd}
			if e.jump != "" {
				se.VerdictData = &expr.Verdict{Kind: expr.VerdictGoto, Chain: e.jump}
			}
			d.elems[s.Name] = append(d.elems[s.Name], se)
		}
	}
	return d
}

// svcPkt is a connection's first packet and where it is seen.
type svcPkt struct {
	src, dst     netip.Addr
	sport, dport uint16
	proto        byte
	fromNode     bool   // fib saddr type local
	hash         uint32 // what jhash gives (mod the rule's modulus)
}

// svcResult is what the table did with it.
type svcResult struct {
	verdict string // "dnat", "reject", "drop", "accept"
	to      netip.AddrPort
	masq    bool
}

func (r svcResult) String() string {
	return fmt.Sprintf("%s %v masq=%t", r.verdict, r.to, r.masq)
}

type svcTracer struct {
	d    *svcDump
	aff  map[string]map[string][]byte // dynamic maps: set -> key -> data
	p    svcPkt
	regs [4*16 + 16*4]byte
	mark uint32
	res  svcResult
}

func (tr *svcTracer) load(r uint32, b []byte) {
	off := regOffset(r)
	n := (len(b) + 3) / 4 * 4
	clear(tr.regs[off : off+n])
	copy(tr.regs[off:], b)
}

func (tr *svcTracer) read(r uint32, n int) []byte { return tr.regs[regOffset(r) : regOffset(r)+n] }

func (tr *svcTracer) payload(e *expr.Payload) []byte {
	v6 := tr.p.src.Is6()
	if e.Base == expr.PayloadBaseTransportHeader {
		if e.Offset == 0 {
			return be16(tr.p.sport)
		}
		return be16(tr.p.dport)
	}
	switch {
	case !v6 && e.Offset == 12, v6 && e.Offset == 8:
		return tr.p.src.AsSlice()
	case !v6 && e.Offset == 16, v6 && e.Offset == 24:
		return tr.p.dst.AsSlice()
	}
	panic(fmt.Sprintf("payload %+v", e))
}

// member finds key in set name: found, and the element's data.
func (tr *svcTracer) member(name string, key []byte) (bool, nftables.SetElement) {
	if m, ok := tr.aff[name]; ok || tr.d.sets[name].Dynamic {
		v, ok := m[string(key)]
		return ok, nftables.SetElement{Val: v}
	}
	s := tr.d.sets[name]
	els := tr.d.elems[name]
	if s.Interval {
		sorted := slices.Clone(els)
		sort.Slice(sorted, func(i, j int) bool { return bytes.Compare(sorted[i].Key, sorted[j].Key) < 0 })
		in := false
		for _, e := range sorted {
			if bytes.Compare(e.Key, key) > 0 {
				break
			}
			in = !e.IntervalEnd
		}
		return in, nftables.SetElement{}
	}
	for _, e := range els {
		if bytes.Equal(e.Key, key) {
			return true, e
		}
	}
	return false, nftables.SetElement{}
}

// keyLen is the length of set name's keys: its elements', or an
// address (the affinity maps, keyed by the client).
func (tr *svcTracer) keyLen(name string) int {
	if els := tr.d.elems[name]; len(els) > 0 {
		return len(els[0].Key)
	}
	return len(tr.p.src.AsSlice())
}

// run walks chain; it returns false when the packet goes on after it
// (accept by the base chain's policy).
func (tr *svcTracer) run(chain string) bool {
	for _, r := range tr.d.chains[chain] {
		v := tr.rule(r.Exprs)
		if v == nil {
			continue
		}
		switch v.Kind {
		case expr.VerdictGoto:
			return tr.run(v.Chain)
		case expr.VerdictJump:
			if tr.run(v.Chain) {
				return true
			}
		case expr.VerdictDrop:
			if tr.res.verdict != "reject" {
				tr.res.verdict = "drop"
			}
			return true
		case expr.VerdictAccept:
			return true
		case expr.VerdictReturn:
			return false
		}
	}
	return false
}

// rule runs one rule's expressions: its verdict, or nil to go on.
func (tr *svcTracer) rule(exprs []expr.Any) *expr.Verdict {
	for _, e := range exprs {
		switch e := e.(type) {
		case *expr.Meta:
			switch {
			case e.SourceRegister && e.Key == expr.MetaKeyMARK:
				tr.mark = binaryutil.NativeEndian.Uint32(tr.read(e.Register, 4))
			case e.Key == expr.MetaKeyNFPROTO:
				p := byte(unix.NFPROTO_IPV4)
				if tr.p.src.Is6() {
					p = unix.NFPROTO_IPV6
				}
				tr.load(e.Register, []byte{p})
			case e.Key == expr.MetaKeyL4PROTO:
				tr.load(e.Register, []byte{tr.p.proto})
			case e.Key == expr.MetaKeyMARK:
				tr.load(e.Register, binaryutil.NativeEndian.PutUint32(tr.mark))
			default:
				panic(fmt.Sprintf("meta %+v", e))
			}
		case *expr.Cmp:
			got := tr.read(e.Register, len(e.Data))
			eq := bytes.Equal(got, e.Data)
			if (e.Op == expr.CmpOpEq) != eq {
				return nil
			}
		case *expr.Payload:
			tr.load(e.DestRegister, tr.payload(e))
		case *expr.Bitwise:
			b := tr.read(e.SourceRegister, int(e.Len))
			out := make([]byte, e.Len)
			for i := range out {
				out[i] = b[i]&e.Mask[i] ^ e.Xor[i]
			}
			tr.load(e.DestRegister, out)
		case *expr.Lookup:
			ok, el := tr.member(e.SetName, tr.read(e.SourceRegister, tr.keyLen(e.SetName)))
			if ok == e.Invert {
				return nil
			}
			if e.IsDestRegSet {
				if e.DestRegister == 0 {
					return el.VerdictData
				}
				tr.load(e.DestRegister, el.Val)
			}
		case *expr.Fib:
			rt := uint32(unix.RTN_UNICAST)
			if tr.p.fromNode {
				rt = unix.RTN_LOCAL
			}
			tr.load(e.Register, binaryutil.NativeEndian.PutUint32(rt))
		case *expr.Hash:
			tr.load(e.DestRegister, binaryutil.NativeEndian.PutUint32(tr.p.hash%e.Modulus))
		case *expr.Dynset:
			if tr.aff[e.SetName] == nil {
				tr.aff[e.SetName] = map[string][]byte{}
			}
			k := string(tr.read(e.SrcRegKey, tr.keyLen(e.SetName)))
			if _, ok := tr.aff[e.SetName][k]; !ok {
				tr.aff[e.SetName][k] = slices.Clone(tr.read(e.SrcRegData, 4)) // a slot
			}
		case *expr.Immediate:
			tr.load(e.Register, e.Data)
		case *expr.NAT:
			n := 4
			if e.Family == unix.NFPROTO_IPV6 {
				n = 16
			}
			a, _ := netip.AddrFromSlice(tr.read(e.RegAddrMin, n))
			p := tr.read(e.RegProtoMin, 2)
			tr.res.verdict, tr.res.to = "dnat", netip.AddrPortFrom(a, uint16(p[0])<<8|uint16(p[1]))
			return &expr.Verdict{Kind: expr.VerdictAccept}
		case *expr.Reject:
			tr.res.verdict = "reject"
			return &expr.Verdict{Kind: expr.VerdictDrop}
		case *expr.Verdict:
			return e
		case *expr.Masq:
			tr.res.masq = true
			return &expr.Verdict{Kind: expr.VerdictAccept}
		case *expr.Ct:
			st := uint32(0)
			switch {
			case e.Key == expr.CtKeySTATE:
				st = expr.CtStateBitNEW // a connection's first packet
			case tr.res.verdict == "dnat":
				st = ctStatusDNATBit
			}
			tr.load(e.Register, binaryutil.NativeEndian.PutUint32(st))
		default:
			panic(fmt.Sprintf("expression %T", e))
		}
	}
	return nil
}

const ctStatusDNATBit = 1 << 5

// trace runs p through the hooks: the shards' nat prerouting (or
// output, the same chains) one after the other until one translates or
// ends it, the filter forward (or output) with the destination
// translated, then the nat postrouting.
func (d *svcDump) trace(p svcPkt, aff map[string]map[string][]byte) svcResult {
	tr := &svcTracer{d: d, aff: aff, p: p}
	tr.res.verdict = "accept"
	hook, filter := "prerouting", svcChainFilterFwd
	if p.fromNode {
		hook, filter = "output", svcChainFilterOut
	}
	for _, sh := range d.shards {
		tr.d = sh
		tr.run(hook)
		if tr.res.verdict != "accept" {
			break
		}
	}
	tr.d = d
	if tr.res.verdict == "drop" || tr.res.verdict == "reject" {
		tr.res.masq = false
		return tr.res
	}
	if tr.res.verdict == "dnat" {
		tr.p.dst = tr.res.to.Addr()
	}
	nat := tr.res
	if tr.run(filter) {
		if tr.res.verdict == "reject" || tr.res.verdict == "drop" {
			tr.res.to, tr.res.masq = netip.AddrPort{}, false
			return tr.res
		}
	}
	tr.res = nat
	tr.run("postrouting")
	return tr.res
}

// expectSvc is what kube-proxy does with a connection from src to fe of
// sp: the endpoints it may reach, or "reject"/"drop", and masquerade.
func expectSvc(snap *svcmodel.Snapshot, sp *svcmodel.ServicePort, fe svcmodel.Frontend, src netip.Addr, fromNode bool) (eps []netip.AddrPort, verdict string, masq bool) {
	inCluster := slices.ContainsFunc(snap.ClusterCIDRs, func(p netip.Prefix) bool { return p.Contains(src) })
	set := sp.ClusterEndpoints
	if fe.Kind == svcmodel.ClusterIP {
		if sp.InternalLocal {
			set = sp.LocalEndpoints
		}
		masq = !inCluster
	} else {
		if fe.Kind == svcmodel.LoadBalancer && len(sp.SourceRanges) > 0 && src != fe.Addr &&
			!slices.ContainsFunc(sp.SourceRanges, func(p netip.Prefix) bool { return p.Contains(src) }) {
			return nil, "drop", false
		}
		switch {
		case !sp.ExternalLocal:
			masq = true
		case inCluster: // pods: policy Cluster, not masqueraded
		case fromNode:
			masq = true
		default:
			set = sp.LocalEndpoints
		}
	}
	if len(set) == 0 {
		if !sp.HasEndpoints {
			return nil, "reject", false
		}
		return nil, "drop", false
	}
	for _, e := range set {
		eps = append(eps, netip.AddrPortFrom(e.Addr, e.Port))
	}
	slices.SortFunc(eps, netip.AddrPort.Compare)
	return eps, "dnat", masq
}

func TestServicesTrace(t *testing.T) {
	k := nftfake.New()
	h := OpenDial(k.Dial())
	t.Cleanup(func() { h.Close() })
	snap := traceSnap()
	s := NewServices(h, ServicesOptions{})
	if err := s.Apply(snap); err != nil {
		t.Fatal(err)
	}
	c, err := k.Conn()
	if err != nil {
		t.Fatal(err)
	}
	d := dumpSvc(t, h, c)
	checkSvcTrace(t, d, snap)
}

// checkSvcTrace traces every frontend of snap from a pod, an outside
// client, the node and (hairpin) each endpoint, over enough hashes to
// reach every slot.
func checkSvcTrace(t *testing.T, d *svcDump, snap *svcmodel.Snapshot) {
	t.Helper()
	srcs := map[svcmodel.Family][]netip.Addr{
		svcmodel.IPv4: {netip.MustParseAddr("10.1.5.5"), netip.MustParseAddr("203.0.113.9"), netip.MustParseAddr("192.0.2.99")},
		svcmodel.IPv6: {netip.MustParseAddr("fd01::55"), netip.MustParseAddr("2001:db8:9::9"), netip.MustParseAddr("2001:db8:7::7")},
	}
	n := 0
	for i := range snap.Ports {
		sp := &snap.Ports[i]
		for _, fe := range sp.Frontends {
			dsts := []netip.Addr{fe.Addr}
			if fe.Kind == svcmodel.NodePort {
				dsts = nil
				for _, a := range snap.NodePortAddrs {
					if svcmodel.FamilyOf(a) == sp.Family {
						dsts = append(dsts, a)
					}
				}
			}
			from := slices.Clone(srcs[sp.Family])
			for _, e := range sp.ClusterEndpoints {
				from = append(from, e.Addr) // hairpin
			}
			for _, dst := range dsts {
				for _, src := range from {
					for _, fromNode := range []bool{false, true} {
						wantEPs, wantV, wantMasq := expectSvc(snap, sp, fe, src, fromNode)
						var got []netip.AddrPort
						aff := map[string]map[string][]byte{} // one client's connections share it
						for hv := uint32(0); hv < 127; hv++ {
							p := svcPkt{src: src, dst: dst, sport: 40000 + uint16(hv), dport: fe.Port, proto: protoNum(sp.Protocol), fromNode: fromNode, hash: hv}
							if sp.AffinityTimeout == 0 {
								aff = map[string]map[string][]byte{}
							}
							r := d.trace(p, aff)
							n++
							m := wantMasq || (r.verdict == "dnat" && r.to.Addr() == src)
							if r.verdict != wantV || (r.verdict == "dnat" && r.masq != m) {
								t.Fatalf("%s %v %v from %v (node %t, hash %d): %v, want %s masq=%t", sp.Name, sp.Protocol, fe.Kind, src, fromNode, hv, r, wantV, m)
							}
							if r.verdict == "dnat" && !slices.Contains(got, r.to) {
								got = append(got, r.to)
							}
						}
						slices.SortFunc(got, netip.AddrPort.Compare)
						if sp.AffinityTimeout > 0 && wantV == "dnat" {
							if len(got) != 1 || !slices.Contains(wantEPs, got[0]) {
								t.Errorf("%s %v %v from %v (node %t), sessionAffinity: reaches %v, want one of %v", sp.Name, sp.Protocol, fe.Kind, src, fromNode, got, wantEPs)
							}
							continue
						}
						if !slices.Equal(got, wantEPs) {
							t.Errorf("%s %v %v from %v (node %t): reaches %v, want %v", sp.Name, sp.Protocol, fe.Kind, src, fromNode, got, wantEPs)
						}
					}
				}
			}
		}
	}
	if n == 0 && len(snap.Ports) > 0 {
		t.Fatal("nothing traced")
	}
}

// TestServicesTraceServiceRange: a new connection to a ClusterIP on a
// port none of its Services has is rejected, to an unallocated address
// of the Service range dropped, from a pod and from the node, both
// families; served frontends and NodePorts are not; Apply keeps the
// ClusterIPs and the ranges as the snapshot changes.
func TestServicesTraceServiceRange(t *testing.T) {
	k := nftfake.New()
	h := OpenDial(k.Dial())
	t.Cleanup(func() { h.Close() })
	snap := traceSnap()
	s := NewServices(h, ServicesOptions{})
	if err := s.Apply(snap); err != nil {
		t.Fatal(err)
	}
	c, err := k.Conn()
	if err != nil {
		t.Fatal(err)
	}
	pod4, pod6 := netip.MustParseAddr("10.1.5.5"), netip.MustParseAddr("fd01::55")
	type tc struct {
		dst   string
		port  uint16
		proto byte
		want  string
	}
	check := func(step string, cases []tc) {
		t.Helper()
		d := dumpSvc(t, h, c)
		for _, x := range cases {
			dst := netip.MustParseAddr(x.dst)
			src := pod4
			if dst.Is6() {
				src = pod6
			}
			for _, fromNode := range []bool{false, true} {
				r := d.trace(svcPkt{src: src, dst: dst, sport: 40000, dport: x.port, proto: x.proto, fromNode: fromNode}, map[string]map[string][]byte{})
				if r.verdict != x.want {
					t.Errorf("%s: %s port %d proto %d (from the node %t): %v, want %s", step, x.dst, x.port, x.proto, fromNode, r, x.want)
				}
			}
		}
	}
	tcp, udp := byte(unix.IPPROTO_TCP), byte(unix.IPPROTO_UDP)
	check("first", []tc{
		{"10.96.0.10", 80, tcp, "dnat"},      // served
		{"10.96.0.10", 81, tcp, "reject"},    // a port no Service has
		{"10.96.0.10", 80, udp, "reject"},    // a protocol no Service has
		{"10.96.0.11", 53, udp, "reject"},    // no endpoints (the Service's own reject)
		{"10.96.0.99", 80, tcp, "drop"},      // unallocated
		{"10.97.0.1", 80, tcp, "accept"},     // not the Service range
		{"fd96::10", 80, tcp, "dnat"},        // served
		{"fd96::a", 54, udp, "reject"},       // a port no Service has
		{"fd96::99", 80, tcp, "drop"},        // unallocated
		{"fd97::1", 80, tcp, "accept"},       // not the Service range
		{"192.0.2.10", 30080, tcp, "dnat"},   // a NodePort
		{"192.0.2.10", 31000, tcp, "accept"}, // not a NodePort: the node's own
		{"198.51.100.7", 81, tcp, "accept"},  // an LB address is no ClusterIP
	})
	// a/one leaves, the v6 range goes: its ClusterIP is unallocated.
	next := *snap
	next.Ports = slices.DeleteFunc(slices.Clone(snap.Ports), func(sp svcmodel.ServicePort) bool { return sp.Name.Name == "one" })
	next.ServiceCIDRs = snap.ServiceCIDRs[:1]
	if err := s.Apply(&next); err != nil {
		t.Fatal(err)
	}
	check("a/one deleted, no v6 range", []tc{
		{"10.96.0.13", 9, unix.IPPROTO_SCTP, "drop"},
		{"10.96.0.12", 81, tcp, "reject"},
		{"fd96::99", 80, tcp, "accept"},
		{"fd96::a", 54, udp, "reject"},
	})
	if err := s.Apply(snap); err != nil {
		t.Fatal(err)
	}
	check("back", []tc{{"10.96.0.13", 9, unix.IPPROTO_SCTP, "dnat"}, {"10.96.0.13", 10, unix.IPPROTO_SCTP, "reject"}, {"fd96::99", 80, tcp, "drop"}})
	// Someone deletes a ClusterIP's element: Resync puts it back.
	if err := c.SetDeleteElements(&nftables.Set{Table: svcTable(), Name: svcClusterIPs4, KeyType: nftables.TypeIPAddr},
		[]nftables.SetElement{{Key: netip.MustParseAddr("10.96.0.10").AsSlice()}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	check("drifted", []tc{{"10.96.0.10", 81, tcp, "drop"}})
	if err := s.Resync(snap); err != nil {
		t.Fatal(err)
	}
	check("resynced", []tc{{"10.96.0.10", 81, tcp, "reject"}})
}
