package nft

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// The policy table's rules traced without a kernel (as kube-proxy's
// tracePacket over knftables' fake): renderPolicy's expressions walked for
// a connection's first packet, set lookups answered from the model's
// sets, so a renderer that decides otherwise than policymodel's Evaluate
// fails here, as a normal user.

// tracer walks one rendering for one connection.
type tracer struct {
	pc   *policyChains
	sets map[string]*policymodel.Set // by nftables set name (family part)
	c    policymodel.Conn
	// state is the packet's conntrack state (expr.CtStateBit*): 0 for a
	// new connection's first packet. An INVALID or UNTRACKED packet has
	// no conntrack entry: every ct load but its state's fails.
	state uint32
	// icmpType is the first byte of the transport header of an ICMP or
	// ICMPv6 packet.
	icmpType byte
	regs     [4*16 + 16*4]byte
	hits     []string // per walk (egress, then ingress): the last counter a rule counted
	logs     []string // the prefixes of the log statements run
	meters   []string // the dynamic sets updated: "<set> <key in hex>"
}

// regOffset is where register r's bytes start (NFT_REG_1..4: 16 bytes,
// NFT_REG32_00..15: 4 bytes, sharing the same space).
func regOffset(r uint32) int {
	if r >= 8 {
		return int(r-8) * 4
	}
	return int(r-1) * 16
}

func (tr *tracer) load(r uint32, b []byte) { copy(tr.regs[regOffset(r):], b) }

func (tr *tracer) read(r uint32, n int) []byte { return tr.regs[regOffset(r) : regOffset(r)+n] }

// ct is the connection's conntrack key k of direction dir: no NAT, so the
// reply's source is the original destination.
func (tr *tracer) ct(e *expr.Ct) []byte {
	dir := e.Direction >> 24 // ctDir
	switch e.Key {
	case expr.CtKeySRC:
		a := tr.c.Src
		if dir == 1 {
			a = tr.c.Dst
		}
		b := make([]byte, 16) // the inet table loads all 16 bytes
		copy(b, a.AsSlice())
		return b
	case expr.CtKeyPROTOCOL:
		return []byte{byte(tr.c.Proto)}
	case expr.CtKeyPROTOSRC:
		return be16(tr.c.Port)
	case expr.CtKeyMARK:
		return make([]byte, 4) // a new connection: mark 0
	}
	panic(fmt.Sprintf("ct key %d", e.Key))
}

// payload is the packet's header field e loads: an address of the network
// header, the destination port or the ICMP type of the transport header.
func (tr *tracer) payload(e *expr.Payload) []byte {
	v6 := tr.c.Src.Is6()
	switch {
	case e.Base == expr.PayloadBaseNetworkHeader && !v6 && e.Len == 4 && (e.Offset == 12 || e.Offset == 16),
		e.Base == expr.PayloadBaseNetworkHeader && v6 && e.Len == 16 && (e.Offset == 8 || e.Offset == 24):
		a := tr.c.Src
		if e.Offset == 16 || e.Offset == 24 {
			a = tr.c.Dst
		}
		return a.AsSlice()
	case e.Base == expr.PayloadBaseTransportHeader && e.Offset == 2 && e.Len == 2:
		return be16(tr.c.Port)
	case e.Base == expr.PayloadBaseTransportHeader && e.Offset == 0 && e.Len == 1:
		return []byte{tr.icmpType}
	}
	panic(fmt.Sprintf("payload %+v", e))
}

// lookup reports whether e's set holds the key in e's source register.
func (tr *tracer) lookup(e *expr.Lookup) bool {
	if e.IsDestRegSet || slices.Contains(policyGenSets[:], e.SetName) {
		return e.IsDestRegSet // the verdict cache: mark 0 is in no generation; the maps map it
	}
	s := tr.sets[e.SetName]
	if s == nil {
		return false // pending, attached: empty
	}
	n := 4
	if strings.HasSuffix(e.SetName, "-6") {
		n = 16
	}
	a, _ := netip.AddrFromSlice(tr.read(e.SourceRegister, n))
	if s.Kind == policymodel.Pairs { // pod . destination
		dst, _ := netip.AddrFromSlice(tr.read(e.SourceRegister, 2*n)[n:])
		return s.Has(policymodel.PairElem(a, dst))
	}
	if s.Kind != policymodel.Ported {
		return s.Contains(a)
	}
	rest := tr.read(e.SourceRegister, n+8)[n:]
	return s.Has(policymodel.Elem{Prefix: policymodel.AddrElem(a).Prefix, Proto: policymodel.Protocol(rest[0]),
		Port: uint16(rest[4])<<8 | uint16(rest[5])})
}

// rule runs one rule: its verdict if all its matches held, nil if one did
// not (or it has none): go on.
func (tr *tracer) rule(r []expr.Any) (v *expr.Verdict) {
	for _, e := range r {
		switch e := e.(type) {
		case *expr.Ct:
			switch {
			case e.SourceRegister:
			case e.Key == expr.CtKeySTATE:
				st := tr.state
				if st == 0 {
					st = expr.CtStateBitNEW
				}
				tr.load(e.Register, binaryutil.NativeEndian.PutUint32(st))
			case tr.state&(expr.CtStateBitINVALID|expr.CtStateBitUNTRACKED) != 0:
				return nil // no conntrack entry: the load breaks the rule
			default:
				tr.load(e.Register, tr.ct(e))
			}
		case *expr.Meta:
			switch e.Key {
			case expr.MetaKeyNFPROTO:
				fam := byte(unix.NFPROTO_IPV4)
				if tr.c.Src.Is6() {
					fam = unix.NFPROTO_IPV6
				}
				tr.load(e.Register, []byte{fam})
			case expr.MetaKeyL4PROTO:
				tr.load(e.Register, []byte{byte(tr.c.Proto), 0, 0, 0})
			default:
				panic(fmt.Sprintf("meta key %d", e.Key))
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
			if tr.lookup(e) == e.Invert {
				return nil
			}
		case *expr.Cmp:
			eq := bytes.Equal(tr.read(e.Register, len(e.Data)), e.Data)
			if e.Op != expr.CmpOpEq && e.Op != expr.CmpOpNeq {
				panic(fmt.Sprintf("cmp op %d", e.Op))
			}
			if eq != (e.Op == expr.CmpOpEq) {
				return nil
			}
		case *expr.Range:
			b := tr.read(e.Register, len(e.FromData))
			if bytes.Compare(b, e.FromData) < 0 || bytes.Compare(b, e.ToData) > 0 {
				return nil
			}
		case *expr.Objref:
			if len(tr.hits) == 0 {
				tr.hits = []string{""}
			}
			tr.hits[len(tr.hits)-1] = e.Name
		case *expr.Limit: // under the rate: goes on
		case *expr.Immediate:
			tr.load(e.Register, e.Data)
		case *expr.Dynset: // a meter, under its rate: goes on
			n := map[string]int{policyLogNode: 4, policySetName(policyLogSrc, false): 8, policySetName(policyLogSrc, true): 20}[e.SetName]
			if n == 0 || e.Operation != unix.NFT_DYNSET_OP_UPDATE || len(e.Exprs) != 1 {
				panic(fmt.Sprintf("dynset %+v", e))
			}
			if _, ok := e.Exprs[0].(*expr.Limit); !ok {
				panic(fmt.Sprintf("dynset expression %T", e.Exprs[0]))
			}
			tr.meters = append(tr.meters, fmt.Sprintf("%s %x", e.SetName, tr.read(e.SrcRegKey, n)))
		case *expr.Log:
			tr.logs = append(tr.logs, string(e.Data))
		case *expr.Verdict:
			return e
		default:
			panic(fmt.Sprintf("expression %T", e))
		}
	}
	return nil
}

// run walks chain and what it jumps to; it reports whether the packet is
// accepted (the end of the base chain: its policy, accept).
func (tr *tracer) run(chain string) bool {
	type frame struct {
		chain string
		next  int
	}
	stack := []frame{{chain, 0}}
	for len(stack) > 0 {
		f := &stack[len(stack)-1]
		rules := tr.pc.rules[f.chain]
		if f.next >= len(rules) {
			stack = stack[:len(stack)-1]
			continue
		}
		v := tr.rule(rules[f.next])
		f.next++
		if v == nil {
			continue
		}
		switch v.Kind {
		case expr.VerdictAccept:
			return true
		case expr.VerdictDrop:
			return false
		case expr.VerdictReturn:
			stack = stack[:len(stack)-1]
		case expr.VerdictJump:
			stack = append(stack, frame{v.Chain, 0})
		case expr.VerdictGoto:
			if strings.HasPrefix(v.Chain, "ingress") { // allow-eg's: the ingress walk
				if len(tr.hits) == 0 {
					tr.hits = []string{""}
				}
				tr.hits = append(tr.hits, "")
			}
			*f = frame{v.Chain, 0}
		}
	}
	return true
}

// TestPolicyRenderTrace: for every connection of a grid over the model's
// addresses, protocols and ports, the rendered rules decide it as
// Evaluate does (allowed when both directions are), from both entry
// chains (forwarded, and a pod's to the node), and count each walk last
// on its deciding rule's counter: egress's, then, when egress allows,
// ingress's (the isolation's when no NetworkPolicy rule allows it). The
// same packet untracked (no conntrack entry, by a NOTRACK rule) is decided
// and counted the same by the untracked twins, which read its own fields;
// the same packet INVALID (conntrack could not place it) is dropped on
// c-invalid before any rule, on the input hook where a pod of the node
// (the attached set) sends it, and judged as an untracked one otherwise.
func TestPolicyRenderTrace(t *testing.T) {
	t.Parallel()
	m, addrs := traceModel()
	pc, _ := renderPolicy(&m.Rules, nil)
	sets := traceSets(m)
	n, decided := 0, map[string]bool{}
	traceConns(addrs, func(c policymodel.Conn) {
		eg, in := m.Evaluate(policymodel.Egress, c), m.Evaluate(policymodel.Ingress, c)
		var wantHits []string
		for _, v := range []struct {
			policymodel.Verdict
			dir policymodel.Direction
		}{{eg, policymodel.Egress}, {in, policymodel.Ingress}} {
			decided[string(v.Rule)+fmt.Sprint(v.Allowed)] = true
			hit := ""
			switch {
			case v.Rule == policymodel.RuleNode:
			case v.Rule != "":
				hit = counterName(v.Rule.Key())
			case !v.Allowed:
				hit = counterName(policymodel.IsolationKey(v.dir))
			}
			wantHits = append(wantHits, hit)
			if !v.Allowed {
				break // the walk ends at the first drop
			}
		}
		if eg.Rule == "node" || in.Rule == "node" {
			return // no rule: the node's traffic meets no hook of the table (render)
		}
		for _, entry := range []string{"fwd", "input"} {
			for _, state := range []uint32{0, expr.CtStateBitUNTRACKED} {
				tr := &tracer{pc: pc, sets: sets, c: c, state: state}
				got := tr.run(entry + famOf(c))
				if got != (eg.Allowed && in.Allowed) || !slices.Equal(tr.hits, wantHits) {
					t.Errorf("%s, state %d: %+v: rendered %v (counters %q), Evaluate egress %+v, ingress %+v (counters %q)",
						entry, state, c, got, tr.hits, eg, in, wantHits)
				}
			}
			tr := &tracer{pc: pc, sets: sets, c: c, state: expr.CtStateBitINVALID}
			got := tr.run(entry + famOf(c))
			wantAllowed, wantInvalid := false, []string{counterName(policyInvalid)}
			if entry == "input" && !sets[policySetName(PolicyAttached, c.Src.Is6())].Contains(c.Src) {
				// not an attached pod's: judged as an untracked packet
				wantAllowed, wantInvalid = eg.Allowed && in.Allowed, wantHits
			}
			if got != wantAllowed || !slices.Equal(tr.hits, wantInvalid) {
				t.Errorf("%s: %+v invalid: rendered %v (counters %q), want %v (counters %q)", entry, c, got, tr.hits, wantAllowed, wantInvalid)
			}
		}
		n++
	})
	// Every rule that can decide did, and so did the isolation and the
	// default: the grid reaches every path.
	for _, w := range []string{"cnp/a1/ingress/0false", "cnp/a1/ingress/2true", "cnp/a2/ingress/0false",
		"np/x/db/ingress/0true", "np/x/db/ingress/1true", "cnp/b1/ingress/0false", "cnp/e1/egress/0true",
		"cnp/e1/egress/1true", "cnp/e1/egress/2false", "cnp/e2/egress/0false", "false", "true", "nodetrue"} {
		if !decided[w] {
			t.Errorf("no connection of the grid decided by %q", w)
		}
	}
	if n < 200 {
		t.Fatalf("%d connections traced", n)
	}
}

// traceSets are m's sets by nftables name, and the attached set (the
// node's pods: the addresses of set "pods").
func traceSets(m *policymodel.Model) map[string]*policymodel.Set {
	sets := map[string]*policymodel.Set{}
	for id, s := range m.Sets {
		sets[policySetName(string(id), false)], sets[policySetName(string(id), true)] = s, s
	}
	sets[policySetName(PolicyAttached, false)], sets[policySetName(PolicyAttached, true)] = m.Sets["pods"], m.Sets["pods"]
	return sets
}

// TestPolicyRenderTraceDiscovery: untracked ICMPv6 router, neighbour and
// multicast listener discovery (conntrack never tracks them) pass both
// entry chains unjudged, from a pod whose egress the policies close; an
// untracked echo request, or a discovery type conntrack does track, is
// judged as Evaluate judges its connection.
func TestPolicyRenderTraceDiscovery(t *testing.T) {
	t.Parallel()
	m, _ := traceModel()
	pc, _ := renderPolicy(&m.Rules, nil)
	sets := traceSets(m)
	web6, db6 := netip.MustParseAddr("fd00:9::2"), netip.MustParseAddr("fd00:9::3")
	// web6 to db6: db's isolation (no rule allows ICMPv6)
	for _, c := range []policymodel.Conn{
		{Src: web6, Dst: netip.MustParseAddr("2001:db8::9"), Proto: policymodel.Protocol(unix.IPPROTO_ICMPV6)}, // cnp/e1's Deny
		{Src: web6, Dst: db6, Proto: policymodel.Protocol(unix.IPPROTO_ICMPV6)},
	} {
		want := m.Evaluate(policymodel.Egress, c).Allowed && m.Evaluate(policymodel.Ingress, c).Allowed
		if want {
			t.Fatalf("%+v: the model allows it; the test needs a denied connection", c)
		}
		for _, typ := range []byte{128, 129, 130, 133, 135, 136, 137, 143} {
			discovery := typ >= 130 && typ <= 136 || typ == 143
			for _, entry := range []string{"fwd6", "input6"} {
				tr := &tracer{pc: pc, sets: sets, c: c, state: expr.CtStateBitUNTRACKED, icmpType: typ}
				if got := tr.run(entry); got != (discovery || want) {
					t.Errorf("%s: untracked ICMPv6 type %d %s -> %s: accepted %v, want %v", entry, typ, c.Src, c.Dst, got, discovery || want)
				}
			}
		}
	}
}

// famOf is the family part of the chain names for c's addresses.
func famOf(c policymodel.Conn) string {
	return policyDir{v6: c.Src.Is6()}.fam()
}

// traceModel is a node with every tier, action and clause form, and the
// addresses to probe.
func traceModel() (*policymodel.Model, []netip.Addr) {
	a := netip.MustParseAddr
	web4, web6, db4, db6 := a("10.9.0.2"), a("fd00:9::2"), a("10.9.0.3"), a("fd00:9::3")
	out4, out6, node4 := a("192.0.2.7"), a("2001:db8::7"), a("10.9.0.1")
	el := policymodel.AddrElem
	sets := []*policymodel.Set{
		policymodel.NewSet("web", policymodel.Addrs, "app=web", el(web4), el(web6)),
		policymodel.NewSet("db", policymodel.Addrs, "app=db", el(db4), el(db6)),
		policymodel.NewSet("pods", policymodel.Addrs, "all pods", el(web4), el(web6), el(db4), el(db6)),
		policymodel.NewSet("net", policymodel.CIDRs, "192.0.2.0/24, 2001:db8::/64",
			policymodel.Elem{Prefix: netip.MustParsePrefix("192.0.2.0/24")}, policymodel.Elem{Prefix: netip.MustParsePrefix("2001:db8::/64")}),
		policymodel.NewSet("named", policymodel.Ported, "port web",
			policymodel.Elem{Prefix: el(db4).Prefix, Proto: policymodel.TCP, Port: 8080},
			policymodel.Elem{Prefix: el(db6).Prefix, Proto: policymodel.TCP, Port: 8080}),
		policymodel.NewSet("iso", policymodel.Addrs, "isolated", el(db4), el(db6)),
		policymodel.NewSet("node", policymodel.Addrs, "node", el(node4)),
		// web resolved out4 and out6 (a domainNames peer's pairs)
		policymodel.NewSet("resolved", policymodel.Pairs, "domains example.com",
			policymodel.PairElem(web4, out4), policymodel.PairElem(web6, out6)),
	}
	m := &policymodel.Model{Sets: map[policymodel.SetID]*policymodel.Set{}}
	for _, s := range sets {
		m.Sets[s.ID] = s
	}
	rule := func(id policymodel.RuleID, act policymodel.Action, cls ...policymodel.Clause) policymodel.Rule {
		return policymodel.Rule{ID: id, Action: act, Clauses: cls}
	}
	tcp := func(first, last uint16) []policymodel.PortRange {
		return []policymodel.PortRange{{Proto: policymodel.TCP, First: first, Last: last}}
	}
	m.NodeAddrs = "node"
	m.Ingress = policymodel.Tiers{
		Admin: []*policymodel.Policy{
			{ID: "cnp/a1", Tier: policymodel.TierAdmin, Subject: "pods", Rules: []policymodel.Rule{
				rule("cnp/a1/ingress/0", policymodel.Deny, policymodel.Clause{Peer: "net", Ports: tcp(443, 443)}),
				rule("cnp/a1/ingress/1", policymodel.Pass, policymodel.Clause{Peer: "web", Ports: tcp(80, 81)}),
				rule("cnp/a1/ingress/2", policymodel.Accept, policymodel.Clause{Peer: "net"}),
			}},
			{ID: "cnp/a2", Tier: policymodel.TierAdmin, Subject: "db", Rules: []policymodel.Rule{
				rule("cnp/a2/ingress/0", policymodel.Deny, policymodel.Clause{Ports: []policymodel.PortRange{{Proto: policymodel.UDP, First: 0, Last: 65535}}}),
			}},
		},
		NetworkPolicy: []*policymodel.Policy{
			{ID: "np/x/db", Tier: policymodel.TierNetworkPolicy, Subject: "db", Rules: []policymodel.Rule{
				rule("np/x/db/ingress/0", policymodel.Allow, policymodel.Clause{Peer: "web", Ports: tcp(80, 80)}),
				rule("np/x/db/ingress/1", policymodel.Allow, policymodel.Clause{DstPorts: "named"}),
				rule("np/x/db/ingress/2", policymodel.Allow, policymodel.Clause{Peer: "web", Ports: []policymodel.PortRange{}}),
			}},
		},
		Baseline: []*policymodel.Policy{
			{ID: "cnp/b1", Tier: policymodel.TierBaseline, Subject: "web", Rules: []policymodel.Rule{
				rule("cnp/b1/ingress/0", policymodel.Deny, policymodel.Clause{Peer: "db", Ports: []policymodel.PortRange{
					{Proto: policymodel.SCTP, First: 0, Last: 65535}, {Proto: policymodel.TCP, First: 8000, Last: 9000}}}),
			}},
		},
		Isolated: "iso",
	}
	m.Egress = policymodel.Tiers{
		Admin: []*policymodel.Policy{
			{ID: "cnp/e1", Tier: policymodel.TierAdmin, Subject: "web", Rules: []policymodel.Rule{
				rule("cnp/e1/egress/0", policymodel.Accept, policymodel.Clause{Peer: "db", Ports: tcp(80, 80)}),
				rule("cnp/e1/egress/1", policymodel.Accept, policymodel.Clause{Pairs: "resolved", Ports: tcp(443, 443)}),
				rule("cnp/e1/egress/2", policymodel.Deny, policymodel.Clause{Peer: "net"}),
			}},
		},
		Baseline: []*policymodel.Policy{
			{ID: "cnp/e2", Tier: policymodel.TierBaseline, Subject: "pods", Rules: []policymodel.Rule{
				rule("cnp/e2/egress/0", policymodel.Deny, policymodel.Clause{Peer: "pods", Ports: tcp(443, 443)}),
			}},
		},
	}
	return m, []netip.Addr{web4, web6, db4, db6, out4, out6, node4}
}

// TestPolicyRenderLogTrace: with the flow log on, every direction of a
// connection that a rule or a NetworkPolicy's isolation decides is logged
// once (ingress only when egress allowed: a drop ends the walk), with the
// verdict and that rule's counter in the prefix, where the scope says:
// everywhere, or where the pod itself or its peer is in the scope's set;
// a Pass and the default decide nothing and log nothing. An untracked
// packet logs as its connection's first packet does; an INVALID one as a
// deny "invalid", where the deny scope takes one of its addresses. Each
// log passes its source's meter first, keyed by the connection's original
// source and the rule's tag (for an untracked or INVALID packet, its own
// source), then the node's.
func TestPolicyRenderLogTrace(t *testing.T) {
	t.Parallel()
	m, addrs := traceModel()
	sets := traceSets(m)
	for _, log := range []policymodel.FlowLog{
		{Allow: policymodel.LogScope{All: true}, Deny: policymodel.LogScope{All: true}},
		{Deny: policymodel.LogScope{Set: "web"}},
		{Allow: policymodel.LogScope{Set: "db"}},
		{Staged: "web"},
		{Deny: policymodel.LogScope{Set: "db"}, Staged: "web"},
	} {
		m.Log = log
		pc, _ := renderPolicy(&m.Rules, nil)
		logged := 0
		in := func(set policymodel.SetID, a netip.Addr) bool { return m.Sets[set] != nil && m.Sets[set].Contains(a) }
		// wantLogs is what direction dir of c logs, and whether it allows
		wantLogs := func(c policymodel.Conn, dir policymodel.Direction) ([]string, bool) {
			want := m.Evaluate(dir, c)
			self, peer := c.Dst, c.Src
			if dir == policymodel.Egress {
				self, peer = c.Src, c.Dst
			}
			scope := log.Deny
			if want.Allowed {
				scope = log.Allow
			}
			switch {
			case !scope.All && !in(scope.Set, self) && !in(scope.Set, peer) && !in(log.Staged, self):
			case want.Rule != "":
				return []string{policymodel.LogPrefix(want.Allowed, want.Rule.Key())}, want.Allowed
			case !want.Allowed:
				return []string{policymodel.LogPrefix(false, policymodel.IsolationKey(dir))}, false
			case in(log.Staged, self): // the default allow, for the staged policies
				return []string{policymodel.LogPrefix(true, policymodel.DefaultKey(dir))}, true
			}
			return nil, want.Allowed
		}
		traceConns(addrs, func(c policymodel.Conn) {
			if m.Evaluate(policymodel.Egress, c).Rule == "node" || m.Evaluate(policymodel.Ingress, c).Rule == "node" {
				return
			}
			want, allowed := wantLogs(c, policymodel.Egress)
			if allowed {
				more, _ := wantLogs(c, policymodel.Ingress)
				want = append(want, more...)
			}
			for _, state := range []uint32{0, expr.CtStateBitUNTRACKED} {
				tr := &tracer{pc: pc, sets: sets, c: c, state: state}
				tr.run("fwd" + famOf(c))
				if !slices.Equal(tr.logs, want) {
					t.Errorf("log %+v, state %d: %+v: logged %q, want %q", log, state, c, tr.logs, want)
				}
				if w := traceMeters(c, want); !slices.Equal(tr.meters, w) {
					t.Errorf("log %+v, state %d: %+v: meters %q, want %q", log, state, c, tr.meters, w)
				}
				logged += len(tr.logs)
			}
			// INVALID: a deny "invalid" where the deny scope takes its
			// source or destination (a staged policy decides nothing).
			var wantInvalid []string
			if log.Deny.All || in(log.Deny.Set, c.Src) || in(log.Deny.Set, c.Dst) {
				wantInvalid = []string{policymodel.LogPrefix(false, policyInvalid)}
			}
			tr := &tracer{pc: pc, sets: sets, c: c, state: expr.CtStateBitINVALID}
			tr.run("fwd" + famOf(c))
			if !slices.Equal(tr.logs, wantInvalid) {
				t.Errorf("log %+v: %+v invalid: logged %q, want %q", log, c, tr.logs, wantInvalid)
			}
			if w := traceMeters(c, wantInvalid); !slices.Equal(tr.meters, w) {
				t.Errorf("log %+v: %+v invalid: meters %q, want %q", log, c, tr.meters, w)
			}
		})
		if logged == 0 {
			t.Errorf("log %+v: nothing logged on the whole grid", log)
		}
	}
}

// traceMeters are the meters the log rules of prefixes update for c, in
// order: per prefix, its source's (c's source and the rule's tag) and the
// node's.
func traceMeters(c policymodel.Conn, prefixes []string) []string {
	var out []string
	for _, p := range prefixes {
		out = append(out, fmt.Sprintf("%s %x", policySetName(policyLogSrc, c.Src.Is6()), append(c.Src.AsSlice(), logTag(p)...)),
			fmt.Sprintf("%s %x", policyLogNode, make([]byte, 4)))
	}
	return out
}

// traceConns calls f for every connection of the grid over addrs (pairs
// of one family), protocols and ports.
func traceConns(addrs []netip.Addr, f func(policymodel.Conn)) {
	for _, src := range addrs {
		for _, dst := range addrs {
			if src == dst || src.Is4() != dst.Is4() {
				continue
			}
			for _, proto := range []policymodel.Protocol{policymodel.TCP, policymodel.UDP, policymodel.SCTP} {
				for _, port := range []uint16{53, 80, 81, 443, 8080} {
					f(policymodel.Conn{Src: src, Dst: dst, Proto: proto, Port: port})
				}
			}
		}
	}
}
