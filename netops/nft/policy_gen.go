package nft

import (
	"fmt"
	"math/rand/v2"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
)

// The verdict cache. Judging every packet of a connection by the whole
// rule set costs a walk of every policy that selects its pod, at every
// packet (issue 38 measured -95% of request/response rate at 200
// policies). Instead, a connection that one direction's rules allowed
// carries that in its conntrack mark, with the generation of the rules
// that allowed it, and its later packets are accepted on one compare while
// the generation is current. Every transaction on the table starts a new
// generation (the same transaction that changes the rules or the sets), so
// a change still decides an established connection at its next packet
// (docs/policy.md), and a denied connection is never cached (its packets
// walk the rules and are dropped each time).
//
// The mark's bits policyMarkMask are cnibox's (the rest are left as they
// are: Istio's ambient mode, for one, keeps bits of 0xfff there): bit 12
// says "egress allowed, ingress not yet judged" (E), bits 13-31 hold the
// generation. On the forward hook egress (priority -1) runs before ingress
// (priority 0) for every packet, so:
//
//	chain fast-eg  { ct mark & 0xffffe000 == G<<13 accept }   # E or B at G
//	chain fast-in  { ct mark & 0xfffff000 == G<<13 accept }   # B at G
//	chain allow-eg { ct mark set ct mark & 0xfff ^ (G<<13 | 1<<12) accept }
//	chain allow-in { ct mark & 0xfffff000 == G<<13 | 1<<12 ct mark set ... ^ G<<13 accept; accept }
//
// allow-in writes B (both directions allowed at G) only over E at G, so a
// generation that began between a packet's two hooks never certifies an
// egress judged by older rules. A packet on the input hook (a pod to the
// node) meets egress only, and E at G is all it needs. A fresh connection's
// mark (0) never matches: generations start at 1. The set "generation"
// holds G, so that a restarted agent goes on from it; a new table starts at
// a random generation.
const (
	policyMarkMask   = 0xfffff000
	policyMarkEgress = 1 << 12 // E: egress allowed, ingress not judged at G
	policyGenShift   = 13
	policyGenMax     = 1<<(32-policyGenShift) - 1

	policyGenSet = "generation"
)

// policyGenChains are the verdict cache's chains, rewritten by every
// transaction.
var policyGenChains = [...]string{"fast-eg", "fast-in", "allow-eg", "allow-in"}

// fastChain and allowChain are the names of direction dir's ("eg", "in")
// chains.
func fastChain(dir string) string  { return "fast-" + dir }
func allowChain(dir string) string { return "allow-" + dir }

func policyGenObj() *nftables.Set {
	return &nftables.Set{Table: policyTableObj(), Name: policyGenSet, KeyType: nftables.TypeMark,
		Comment: "the rules' generation: conntrack marks of an older one are judged again"}
}

// nextGen is the generation after g (1 after the last; a random one when g
// is unknown).
func nextGen(g uint32) uint32 {
	switch {
	case g == 0:
		return 1 + rand.Uint32N(policyGenMax)
	case g >= policyGenMax:
		return 1
	}
	return g + 1
}

// readGen reads the table's generation into h.policyGen when it is not
// known (0: the table has none).
func (h *Handle) readGen() error {
	if h.policyGen != 0 {
		return nil
	}
	elems, err := h.dumpElems(PolicyTable, policyGenSet)
	if err != nil {
		return fmt.Errorf("read the policy generation: %w", err)
	}
	for _, e := range elems {
		if len(e.key) == 4 {
			h.policyGen = binaryutil.NativeEndian.Uint32(e.key)
		}
	}
	return nil
}

// ctMarkIs is "ct mark & mask == v".
func ctMarkIs(mask, v uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeyMARK},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(mask), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(v)},
	}
}

// setCtMark is "ct mark set ct mark & ^policyMarkMask ^ v".
func setCtMark(v uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeyMARK},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(^uint32(policyMarkMask)), Xor: binaryutil.NativeEndian.PutUint32(v)},
		&expr.Ct{Register: 1, Key: expr.CtKeyMARK, SourceRegister: true},
	}
}

// genRules are the verdict cache's chains at generation g.
func genRules(g uint32) map[string][][]expr.Any {
	gen := g << policyGenShift
	accept := verdict(expr.VerdictAccept, "")
	return map[string][][]expr.Any{
		"fast-eg":  {append(ctMarkIs(policyMarkMask&^policyMarkEgress, gen), accept)},
		"fast-in":  {append(ctMarkIs(policyMarkMask, gen), accept)},
		"allow-eg": {append(setCtMark(gen|policyMarkEgress), accept)},
		"allow-in": {
			append(append(ctMarkIs(policyMarkMask, gen|policyMarkEgress), setCtMark(gen)...), accept),
			{accept},
		},
	}
}

// queueGen queues the generation after h.policyGen (readGen): the
// generation set's element and the verdict cache's chains, made if missing
// and rewritten.
func (t *txn) queueGen() error {
	g := nextGen(t.h.policyGen)
	t.policyGen = g
	cc := t.conn()
	s := policyGenObj()
	if err := t.addSet(s, nil); err != nil {
		return err
	}
	cc.FlushSet(s)
	if err := cc.SetAddElements(s, []nftables.SetElement{{Key: binaryutil.NativeEndian.PutUint32(g)}}); err != nil {
		return err
	}
	rules := genRules(g)
	for _, n := range policyGenChains {
		ch := cc.AddChain(&nftables.Chain{Table: policyTableObj(), Name: n})
		cc.FlushChain(ch)
		for _, e := range rules[n] {
			cc.AddRule(&nftables.Rule{Table: ch.Table, Chain: ch, Exprs: e})
		}
	}
	return nil
}
