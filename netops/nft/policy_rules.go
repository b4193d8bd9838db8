package nft

import (
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// The policy table's chains and rules (the layout is in policy.go).

// policyDir is one direction as the rules see it: which conntrack
// direction's source is the pod itself, and the names of its chains.
type policyDir struct {
	name    string // "in", "eg"
	base    string // "ingress", "egress"
	dir     policymodel.Direction
	selfDir uint32 // 0: the original source (egress); 1: the reply's source (ingress)
	v6      bool
}

func (d policyDir) fam() string {
	if d.v6 {
		return "6"
	}
	return "4"
}

// chain is the name of the per-family chain prefix-id-dir.
func (d policyDir) chain(prefix, id string) string {
	return prefix + "-" + id + "-" + d.name + d.fam()
}

// ctAddr loads the source address of conntrack direction dir into reg:
// all 16 bytes of the tuple's address in an inet table, of which an IPv4
// set's lookup reads the first 4.
func ctAddr(dir, reg uint32) expr.Any {
	return &expr.Ct{Register: reg, Key: expr.CtKeySRC, Direction: ctDir(dir)}
}

// ctDir is conntrack direction dir (0 original, 1 reply) as google/nftables
// must be given it: it sends NFTA_CT_DIRECTION as a big-endian uint32 where
// the kernel reads a u8 (the first byte), so the value goes in the top byte.
// (The same mismatch makes its GetRules fail on these rules: the table is
// read with raw dumps, policy_read.go.)
func ctDir(dir uint32) uint32 { return dir << 24 }

// inSet is "<address of conntrack direction dir> [!=] @set".
func (d policyDir) inSet(dir uint32, set string, neg bool) []expr.Any {
	return []expr.Any{
		ctAddr(dir, 1),
		&expr.Lookup{SourceRegister: 1, SetName: policySetName(set, d.v6), Invert: neg},
	}
}

func (d policyDir) self(set string, neg bool) []expr.Any { return d.inSet(d.selfDir, set, neg) }
func (d policyDir) peer(set string) []expr.Any           { return d.inSet(1-d.selfDir, set, false) }

// ports is "ct protocol P ct reply proto-src First-Last".
func ports(p policymodel.PortRange) []expr.Any {
	e := []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeyPROTOCOL},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{byte(p.Proto)}},
	}
	if p.First == 0 && p.Last == 65535 {
		return e
	}
	e = append(e, &expr.Ct{Register: 1, Key: expr.CtKeyPROTOSRC, Direction: ctDir(1)})
	if p.First == p.Last {
		return append(e, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: be16(p.First)})
	}
	return append(e, &expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: be16(p.First), ToData: be16(p.Last)})
}

// dstPorts is "(destination . protocol . port) @set", the destination
// being the reply's source.
func (d policyDir) dstPorts(set string) []expr.Any {
	proto, port := uint32(9), uint32(10) // 32-bit registers after the address
	if d.v6 {
		proto, port = 12, 13
	}
	return []expr.Any{
		ctAddr(1, 8),
		&expr.Ct{Register: proto, Key: expr.CtKeyPROTOCOL},
		&expr.Ct{Register: port, Key: expr.CtKeyPROTOSRC, Direction: ctDir(1)},
		&expr.Lookup{SourceRegister: 8, SetName: policySetName(set, d.v6)},
	}
}

// pairs is "(pod . peer) @set": the pod's address (self) and the peer's,
// each as the connection's tuple has them.
func (d policyDir) pairs(set string) []expr.Any {
	peer := uint32(9) // the 32-bit register after the pod's address
	if d.v6 {
		peer = 12
	}
	return []expr.Any{
		ctAddr(d.selfDir, 8),
		ctAddr(1-d.selfDir, peer),
		&expr.Lookup{SourceRegister: 8, SetName: policySetName(set, d.v6)},
	}
}

func be16(v uint16) []byte { return []byte{byte(v >> 8), byte(v)} }

// counterName is the name of the counter object of key (policymodel's).
func counterName(key string) string { return policymodel.CounterName(key) }

// countAnd is "counter name N" and a verdict.
func countAnd(counter string, v expr.Any) []expr.Any {
	return []expr.Any{&expr.Objref{Type: unix.NFT_OBJECT_COUNTER, Name: counter}, v}
}

func verdict(k expr.VerdictKind, chain string) expr.Any {
	return &expr.Verdict{Kind: k, Chain: chain}
}

// policyRuleExprs are the nftables rules of r (one per clause and port
// range), each ending in r's counter and v; with log on, each is preceded
// by the rules that log its verdict (logRules).
func (d policyDir) policyRuleExprs(pc *policyChains, r *policymodel.Rule, v expr.Any, log policymodel.LogScope, allow bool) [][]expr.Any {
	staged := pc.log.Staged
	if r.Action == policymodel.Pass {
		staged = "" // no verdict yet
	}
	var out [][]expr.Any
	short := pc.ruleKey(r.ID)
	counter := counterName(short)
	add := func(match []expr.Any) {
		if log.On() || staged != "" {
			out = append(out, d.logRules(match, log, staged, policymodel.LogPrefix(allow, short))...)
		}
		out = append(out, append(match, countAnd(counter, v)...))
	}
	for _, cl := range r.Clauses {
		var base []expr.Any
		if cl.Peer != "" {
			base = append(base, d.peer(string(cl.Peer))...)
		}
		if cl.DstPorts != "" {
			base = append(base, d.dstPorts(string(cl.DstPorts))...)
		}
		if cl.Pairs != "" {
			base = append(base, d.pairs(string(cl.Pairs))...)
		}
		if cl.Ports == nil {
			add(base)
			continue
		}
		for _, p := range cl.Ports {
			add(append(append([]expr.Any{}, base...), ports(p)...))
		}
	}
	return out
}

// logRules are the rules that log a verdict on what match matches, before
// the rule that gives it: everywhere (s.All), or once where the pod itself
// or its peer is in s's set (the peer's rule skips what the first logged),
// or where the pod is in the set of staged policies' subjects (staged;
// skipping what s's rules logged).
func (d policyDir) logRules(match []expr.Any, s policymodel.LogScope, staged policymodel.SetID, prefix string) [][]expr.Any {
	with := func(e ...[]expr.Any) []expr.Any {
		out := append([]expr.Any{}, match...)
		for _, x := range e {
			out = append(out, x...)
		}
		return append(out, d.logExprs(prefix)...)
	}
	if s.All {
		return [][]expr.Any{with()}
	}
	var out [][]expr.Any
	set := string(s.Set)
	if set != "" {
		out = append(out, with(d.self(set, false)), with(d.self(set, true), d.peer(set)))
	}
	if staged != "" {
		if set != "" {
			out = append(out, with(d.self(string(staged), false), d.self(set, true), d.inSet(1-d.selfDir, set, true)))
		} else {
			out = append(out, with(d.self(string(staged), false)))
		}
	}
	return out
}

// render adds the walk of one direction and family to pc: its tiers, from
// chain <base><fam> (egress4, ingress6, ...), which ends in the direction's
// allow (d.allow) or a drop. The entry chains (renderEntries) run the
// pending set and the verdict cache before it.
//
// The node's own addresses (policymodel.Rules.NodeAddrs) are accepted by no
// rule: the node's own traffic to its pods (the kubelet's probes) leaves
// through the output hook, which no chain of the table is on, so it is
// allowed without one; a packet from a node address on the forward hook
// was sent by someone else under that address (a pod, bridged), and is
// judged like any other (issue 48: an accept here let a forged source walk
// around every policy).
func (d policyDir) render(pc *policyChains, t *policymodel.Tiers) {
	top := d.base + d.fam()
	pc.add(top)
	d.renderTier(pc, top, "a", t.Admin)
	if t.Isolated != "" && len(t.NetworkPolicy) > 0 {
		// The tier allows when one of its policies does, in any order: the
		// policies go in npBuckets chains by a hash of their ID, so that a
		// policy's change rewrites the jumps of its bucket's few policies,
		// not one per policy of the node (800 rules at 200 policies, most
		// of a policy change's transaction).
		np := "np-" + d.name + d.fam()
		pc.add(np)
		pc.add(top, append(d.self(string(t.Isolated), false), verdict(expr.VerdictJump, np)))
		var buckets [npBuckets][]*policymodel.Policy
		for _, p := range t.NetworkPolicy {
			b := npBucket(pc.short(p.ID))
			buckets[b] = append(buckets[b], p)
		}
		srcKey := "src\n" + d.name + d.fam() + "|" + logKey(pc.log.Allow, pc.log.Staged) + "|"
		var bk strings.Builder
		for b, ps := range buckets {
			if len(ps) == 0 {
				continue
			}
			bc := fmt.Sprintf("np%d-%s%s", b, d.name, d.fam())
			pc.add(np, []expr.Any{verdict(expr.VerdictJump, bc)})
			pc.add(bc)
			// A bucket's chain is made from its policies' subjects and
			// chains alone: a delta renders the jumps of the buckets it
			// changes, not of every policy of the node.
			bk.Reset()
			bk.WriteString("bucket\n")
			bk.WriteString(d.name)
			bk.WriteString(d.fam())
			chains := make([]string, len(ps))
			for i, p := range ps {
				chains[i] = d.chain("n", pc.short(p.ID))
				bk.WriteByte('|')
				bk.WriteString(string(p.Subject))
				bk.WriteByte(' ')
				bk.WriteString(chains[i])
			}
			pc.keys[bc], pc.kbuf = fpOf(pc.kbuf, bk.String())
			renderJumps := pc.keep == nil || !pc.keep(bc, pc.keys[bc])
			for i, p := range ps {
				ch := chains[i]
				if renderJumps {
					pc.add(bc, append(d.self(string(p.Subject), false), verdict(expr.VerdictJump, ch)))
				}
				pc.add(ch)
				rk, ok := pc.rulesKeys[p]
				if !ok {
					rk = rulesKey(pc, p.Rules)
				}
				pc.keysUsed[p] = rk
				var key chainFP
				key, pc.kbuf = fpOf(pc.kbuf, srcKey, rk)
				pc.keys[ch] = key
				if pc.keep != nil && pc.keep(ch, key) {
					continue // in the kernel as it is: not rendered
				}
				for i := range p.Rules {
					pc.add(ch, d.policyRuleExprs(pc, &p.Rules[i], d.allow(), pc.log.Allow, true)...)
				}
			}
		}
		iso := d.self(string(t.Isolated), false)
		if pc.log.Deny.On() || pc.log.Staged != "" {
			pc.add(top, d.logRules(iso, pc.log.Deny, pc.log.Staged, policymodel.LogPrefix(false, policymodel.IsolationKey(d.dir)))...)
		}
		pc.add(top, append(iso, countAnd(counterName(policymodel.IsolationKey(d.dir)), verdict(expr.VerdictDrop, ""))...))
	}
	d.renderTier(pc, top, "b", t.Baseline)
	if pc.log.Staged != "" {
		// The default decides nothing; a staged policy may (the agent
		// compares).
		pc.add(top, append(d.self(string(pc.log.Staged), false), d.logExprs(policymodel.LogPrefix(true, policymodel.DefaultKey(d.dir)))...))
	}
	pc.add(top, []expr.Any{d.allow()}) // the default
}

// npBuckets is the number of chains the NetworkPolicy tier's policies are
// spread over.
const npBuckets = 32

// npBucket is the bucket of the policy with chain ID id.
func npBucket(id string) int {
	h := fnv.New32a()
	h.Write([]byte(id))
	return int(h.Sum32() % npBuckets)
}

// allow is the verdict that allows a connection in this direction: a goto
// to the chain that marks it allowed at this generation and goes on to
// the ingress walk (egress), or accepts (ingress).
func (d policyDir) allow() expr.Any {
	if d.name == "eg" {
		return verdict(expr.VerdictGoto, allowChain("eg"+d.fam()))
	}
	return verdict(expr.VerdictGoto, allowChain(d.name))
}

// renderTier adds an Admin or Baseline tier: a jump from top to the first
// policy's chain, each policy's chain going to the next (goto, so that a
// Pass's return leaves the whole tier).
func (d policyDir) renderTier(pc *policyChains, top, prefix string, ps []*policymodel.Policy) {
	if len(ps) == 0 {
		return
	}
	pc.add(top, []expr.Any{verdict(expr.VerdictJump, d.chain(prefix, pc.short(ps[0].ID)))})
	for i, p := range ps {
		ch := d.chain(prefix, pc.short(p.ID))
		next := verdict(expr.VerdictReturn, "")
		if i+1 < len(ps) {
			next = verdict(expr.VerdictGoto, d.chain(prefix, pc.short(ps[i+1].ID)))
		}
		pc.add(ch, append(d.self(string(p.Subject), true), next))
		for j := range p.Rules {
			r := &p.Rules[j]
			v, log, allow := d.allow(), pc.log.Allow, true // Allow, Accept
			switch r.Action {
			case policymodel.Deny:
				v, log, allow = verdict(expr.VerdictDrop, ""), pc.log.Deny, false
			case policymodel.Pass:
				v, log = verdict(expr.VerdictReturn, ""), policymodel.LogScope{} // no verdict yet
			}
			pc.add(ch, d.policyRuleExprs(pc, r, v, log, allow)...)
		}
		if i+1 < len(ps) {
			pc.add(ch, []expr.Any{next})
		}
	}
}

// policyBaseChains are the hooked chains: forward (both directions of a
// forwarded packet) and input (a pod's traffic to the node), each
// dispatching by family to its entry chain <to>4 or <to>6
// (renderEntries).
var policyBaseChains = [...]struct {
	name, to string
	hook     nftables.ChainHook // plain values: no code at start-up
	prio     nftables.ChainPriority
}{
	{"forward", "fwd", unix.NF_INET_FORWARD, -1},
	{"input", "input", unix.NF_INET_LOCAL_IN, -1},
}

// baseRules are a base chain's rules: "meta nfproto ipv4 jump <to>4",
// the same for ipv6.
func baseRules(to string) [][]expr.Any {
	return [][]expr.Any{
		append(nfprotoIs(unix.NFPROTO_IPV4), verdict(expr.VerdictJump, to+"4")),
		append(nfprotoIs(unix.NFPROTO_IPV6), verdict(expr.VerdictJump, to+"6")),
	}
}

// rulesKey is rules as text: all a NetworkPolicy's own chain is made of,
// given its direction and family.
func rulesKey(pc *policyChains, rules []policymodel.Rule) string {
	var b strings.Builder
	for _, r := range rules {
		b.WriteString(pc.ruleKey(r.ID))
		b.WriteByte(' ')
		b.WriteString(r.Action.String())
		for _, cl := range r.Clauses {
			b.WriteString(" (")
			b.WriteString(string(cl.Peer))
			b.WriteByte(' ')
			b.WriteString(string(cl.DstPorts))
			if cl.Pairs != "" {
				b.WriteString(" pairs ")
				b.WriteString(string(cl.Pairs))
			}
			if cl.Ports != nil {
				b.WriteString(" ports")
				for _, p := range cl.Ports {
					fmt.Fprintf(&b, " %d:%d-%d", p.Proto, p.First, p.Last)
				}
			}
			b.WriteByte(')')
		}
		b.WriteByte(';')
	}
	return b.String()
}

// logKey is where allows are logged, as text: part of a NetworkPolicy
// chain's key (its rules log or not).
func logKey(s policymodel.LogScope, staged policymodel.SetID) string {
	if s.All {
		return "log all"
	}
	return "log " + string(s.Set) + " staged " + string(staged)
}

// renderPolicy is every regular chain of r with its rules, and the
// counters the rules use. keep (may be nil) says which of the chains made
// from their source alone (policyChains.keys, their fingerprints) the
// kernel has as they are: those are named but not rendered.
func renderPolicy(r *policymodel.Rules, keep func(chain string, key chainFP) bool) (*policyChains, []string) {
	return renderPolicyKeys(r, keep, nil)
}

// renderPolicyKeys is renderPolicy with the rulesKeys of a render before
// (policyTable.rulesKeys); the returned chains' keysUsed are this one's.
func renderPolicyKeys(r *policymodel.Rules, keep func(chain string, key chainFP) bool, rulesKeys map[*policymodel.Policy]string) (*policyChains, []string) {
	return renderPolicyWith(r, keep, rulesKeys, false)
}

// renderPolicyFull is renderPolicy(r, nil) for a full sync: the twins'
// rules are left to policySpec (lazyTwins).
func renderPolicyFull(r *policymodel.Rules) (*policyChains, []string) {
	return renderPolicyWith(r, nil, nil, true)
}

func renderPolicyWith(r *policymodel.Rules, keep func(chain string, key chainFP) bool, rulesKeys map[*policymodel.Policy]string, lazyTwins bool) (*policyChains, []string) {
	return renderPolicyInto(nil, r, keep, rulesKeys, nil, lazyTwins)
}

// renderPolicyInto is renderPolicyWith into reuse's maps (cleared; nil:
// new ones), keysUsed into used (cleared; nil: a new map): a delta renders
// every chain's name again, and new maps of ~3,500 chains were a third of
// its bytes (policyTable.scratch).
func renderPolicyInto(reuse *policyChains, r *policymodel.Rules, keep func(chain string, key chainFP) bool, rulesKeys, used map[*policymodel.Policy]string, lazyTwins bool) (*policyChains, []string) {
	if keep != nil {
		// A chain made from its source is kept only with its untracked
		// twin (policy_entry.go): one is not rendered without the other.
		kept := keep
		keep = func(chain string, key chainFP) bool { return kept(chain, key) && kept(untrackedChain(chain), key) }
	}
	n := len(rulesKeys) // the policies of the render before: the maps' sizes, about
	if used == nil {
		used = make(map[*policymodel.Policy]string, n)
	}
	clear(used)
	pc := reuse
	if pc == nil {
		pc = &policyChains{rules: make(map[string][][]expr.Any, 8*n+300), keys: make(map[string]chainFP, 8*n),
			ids: make(map[string]string, 2*n), twins: make(map[string]twinOf, 4*n+150)}
	} else {
		pc.empty()
		if len(pc.ids) > 4*(2*n+100) { // the IDs of policies long gone
			clear(pc.ids)
		}
	}
	pc.keep, pc.log, pc.rulesKeys, pc.keysUsed, pc.lazyTwins = keep, r.Log, rulesKeys, used, lazyTwins
	renderGen(pc)
	for _, v6 := range []bool{false, true} {
		renderLinkLocal(pc, v6) // policy_linklocal.go: first in fwd6
		renderEntries(pc, v6)
		walk := len(pc.names)
		(policyDir{name: "eg", base: "egress", dir: policymodel.Egress, selfDir: 0, v6: v6}).render(pc, &r.Egress)
		(policyDir{name: "in", base: "ingress", dir: policymodel.Ingress, selfDir: 1, v6: v6}).render(pc, &r.Ingress)
		renderUntracked(pc, pc.names[walk:], v6)
	}
	counters := []string{counterName(PolicyPending), counterName(policymodel.IsolationKey(policymodel.Ingress)),
		counterName(policymodel.IsolationKey(policymodel.Egress)), counterName(policyInvalid), counterName(policyLinkLocal)}
	for _, rule := range r.AllRules() {
		counters = append(counters, counterName(pc.ruleKey(rule.ID)))
	}
	return pc, counters
}

// checkPolicyRules reports names the kernel would refuse.
func checkPolicyRules(r *policymodel.Rules) error {
	for _, p := range r.Policies() {
		if p.ID == "" || p.Subject == "" {
			return fmt.Errorf("policy chain %q without ID or subject", p.ID)
		}
	}
	return nil
}
