package nft

import (
	"bytes"
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
// generation. One base chain judges both directions of a packet (the
// egress walk goes on to the ingress walk), so:
//
//	chain fwd4     { ... ct mark & 0xfffff000 @gen-f accept; <pending>
//	                 ct mark & 0xfffff000 @gen accept; goto egress4 }  # B at G
//	chain allow-eg4 { ct mark set ct mark & 0xfff map @mark-eg; goto ingress4 }
//	chain allow-in { ct mark & 0xfffff000 @gen-e ct mark set ct mark & 0xfff map @mark-in; accept }
//	set gen, gen-f { G<<13 }, set gen-e { G<<13 | 1<<12 }
//	map mark-eg { 0 : G<<13 | 1<<12 }, map mark-in { 0 : G<<13 }
//
// gen-f and gen hold the same element; a CNI ADD that marks addresses
// pending empties gen-f (genFlushMsg): until the agent's next generation,
// cached packets pay the pending check before gen accepts them.
//
// The chains never change: a new generation is five elements replaced, in
// the transaction of the change (a rule rewritten instead made the kernel
// validate the whole table's jumps at every pod event). The maps hold the
// new mark for the other bits' value 0 only (nftables cannot OR two
// registers on Linux 6.1): a connection that another program marked in
// bits 0-11 is not cached and walks the rules at every packet, as before
// the cache. allow-in writes B (both directions allowed at G) only over E
// at G, so a generation that began between a packet's two walks never
// certifies an egress judged by older rules. A connection that egress
// allowed and ingress dropped keeps E, which nothing accepts on: its next
// packet walks both again. A fresh connection's mark (0) never matches:
// generations start at 1. The set gen holds G, so that a restarted agent
// goes on from it; a new table starts at a random generation.
const (
	policyMarkMask   = 0xfffff000
	policyMarkEgress = 1 << 12 // E: egress allowed, ingress not judged at G
	policyGenShift   = 13
	policyGenMax     = 1<<(32-policyGenShift) - 1

	policyGenSet     = "gen"     // G<<13
	policyGenFastSet = "gen-f"   // G<<13, before the pending check; an ADD empties it
	policyGenESet    = "gen-e"   // G<<13 | E
	policyMarkEg     = "mark-eg" // 0 -> G<<13 | E
	policyMarkIn     = "mark-in" // 0 -> G<<13
)

// policyGenSets are the verdict cache's sets and maps, their elements
// replaced by every transaction.
var policyGenSets = [...]string{policyGenSet, policyGenFastSet, policyGenESet, policyMarkEg, policyMarkIn}

// allowChain is the name of the allow chain of dir ("eg4", "eg6", "in").
func allowChain(dir string) string { return "allow-" + dir }

// policyGenObj is the verdict cache's set or map name.
func policyGenObj(name string) *nftables.Set {
	s := &nftables.Set{Table: policyTableObj(), Name: name, KeyType: nftables.TypeMark,
		Comment: "the verdict cache's generation (conntrack marks of another are judged again)"}
	if name == policyMarkEg || name == policyMarkIn {
		s.IsMap, s.DataType = true, nftables.TypeMark
	}
	return s
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

// readGen reads the table's generation into its policyTable when it is
// not known (0: the table has none).
func (h *Handle) readGen() error {
	pt := policyOf(h)
	if pt.gen != 0 {
		return nil
	}
	elems, err := h.dumpElems(PolicyTable, policyGenSet)
	if err != nil {
		return fmt.Errorf("read the policy generation: %w", err)
	}
	for _, e := range elems {
		if len(e.key) == 4 {
			pt.gen = binaryutil.NativeEndian.Uint32(e.key) >> policyGenShift
		}
	}
	return nil
}

// genElems are the verdict cache's elements at generation g, by set.
func genElems(g uint32) map[string]nftables.SetElement {
	gen := g << policyGenShift
	mark := func(v uint32) []byte { return binaryutil.NativeEndian.PutUint32(v) }
	return map[string]nftables.SetElement{
		policyGenSet:     {Key: mark(gen)},
		policyGenFastSet: {Key: mark(gen)},
		policyGenESet:    {Key: mark(gen | policyMarkEgress)},
		policyMarkEg:     {Key: mark(0), Val: mark(gen | policyMarkEgress)},
		policyMarkIn:     {Key: mark(0), Val: mark(gen)},
	}
}

// readGenWhole reads the table's generation (as readGen, whatever its
// policyTable knew) and reports whether the verdict cache's five sets and
// maps hold it and nothing else: a full sync writes a new generation
// when they do not (someone flushed one, or a pod's ADD emptied gen-f).
func (h *Handle) readGenWhole() (bool, error) {
	pt := policyOf(h)
	pt.gen = 0
	if err := h.readGen(); err != nil || pt.gen == 0 {
		return false, err
	}
	for n, want := range genElems(pt.gen) {
		elems, err := h.dumpElems(PolicyTable, n)
		if err != nil {
			return false, fmt.Errorf("read the policy generation: %w", err)
		}
		if len(elems) != 1 || !bytes.Equal(elems[0].key, want.Key) || !bytes.Equal(elems[0].data, want.Val) {
			return false, nil
		}
	}
	return true, nil
}

// ctMarkIn is "ct mark & mask @set".
func ctMarkIn(mask uint32, set string) []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeyMARK},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(mask), Xor: make([]byte, 4)},
		&expr.Lookup{SourceRegister: 1, SetName: set},
	}
}

// ctMarkFrom is "ct mark set ct mark & ^policyMarkMask map @m".
func ctMarkFrom(m string) []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeyMARK},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(^uint32(policyMarkMask)), Xor: make([]byte, 4)},
		&expr.Lookup{SourceRegister: 1, DestRegister: 1, IsDestRegSet: true, SetName: m},
		&expr.Ct{Register: 1, Key: expr.CtKeyMARK, SourceRegister: true},
	}
}

// renderGen adds the verdict cache's allow chains (the same at every
// generation) to pc; the entry chains hold its compare (renderEntries).
func renderGen(pc *policyChains) {
	for _, fam := range []string{"4", "6"} {
		pc.add(allowChain("eg"+fam), ctMarkFrom(policyMarkEg), []expr.Any{verdict(expr.VerdictGoto, "ingress"+fam)})
	}
	pc.add(allowChain("in"), append(ctMarkIn(policyMarkMask, policyGenESet), ctMarkFrom(policyMarkIn)...), []expr.Any{verdict(expr.VerdictAccept, "")})
}

// queueGen queues the generation after the one known (readGen): the
// verdict cache's sets and maps, made if missing, their elements replaced.
func (t *policyTxn) queueGen() error {
	g := nextGen(t.pt.gen)
	t.gen = g
	elems := genElems(g)
	cc := t.conn()
	for _, n := range policyGenSets {
		s := policyGenObj(n)
		if err := t.addSet(s, nil); err != nil {
			return err
		}
		cc.FlushSet(s)
		if err := cc.SetAddElements(s, []nftables.SetElement{elems[n]}); err != nil {
			return err
		}
	}
	return nil
}
