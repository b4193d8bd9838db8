package nft

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"strconv"

	"github.com/google/nftables/expr"
)

// The policy chains' fingerprints: a hash of their rules as text, to tell
// which chains a change of the rules leaves as they are (policyKeeps).

// fingerprints are the chains' rules as text (base chains: their hook),
// hashed (chainFP), to tell which chains a change of the rules leaves as
// they are. An untracked twin's is its chain's (its rules are a function
// of its chain's: untrackedRule), so a twin is written when its chain is,
// and its rules are rendered only then (twinRules).
func fingerprints(pc *policyChains) map[string]chainFP {
	return fingerprintsInto(pc, nil)
}

// fingerprintsInto is fingerprints into fp (cleared; nil: a new map).
func fingerprintsInto(pc *policyChains, fp map[string]chainFP) map[string]chainFP {
	if fp == nil {
		fp = make(map[string]chainFP, len(pc.names)+len(policyBaseChains))
	}
	clear(fp)
	var b bytes.Buffer
	for _, n := range pc.names {
		if k, ok := pc.keys[n]; ok {
			fp[n] = k // of "src\n" and its source
			continue
		}
		if t, ok := pc.twins[n]; ok {
			// Its chain's (its chain comes first: renderUntracked); a
			// mark holds the chain's name too.
			fp[n] = fp[t.chain]
			continue
		}
		b.Reset()
		b.WriteString("chain\n")
		for _, r := range pc.rules[n] {
			for _, e := range r {
				fingerprint(&b, e)
			}
			b.WriteByte('\n')
		}
		sum := sha256.Sum256(b.Bytes())
		fp[n] = chainFP(sum[:16])
	}
	for _, bc := range policyBaseChains {
		fp[bc.name], _ = fpOf(nil, fmt.Sprintf("base %v %d -> %s4 %s6", bc.hook, bc.prio, bc.to, bc.to))
	}
	return fp
}

// fingerprint writes e to b: the fields the policy rules set, for the
// expressions they use (fmt's reflection for any other; it took 40% of a
// policy change's time at 200 policies).
func fingerprint(b *bytes.Buffer, e expr.Any) {
	u := func(vs ...uint64) {
		for _, v := range vs {
			b.WriteString(strconv.FormatUint(v, 16))
			b.WriteByte(',')
		}
	}
	switch e := e.(type) {
	case *expr.Ct:
		b.WriteString("ct:")
		u(uint64(e.Register), uint64(e.Key), uint64(e.Direction), boolBit(e.SourceRegister))
	case *expr.Lookup:
		b.WriteString("lookup:")
		u(uint64(e.SourceRegister), uint64(e.DestRegister), boolBit(e.IsDestRegSet), boolBit(e.Invert))
		b.WriteString(e.SetName)
	case *expr.Cmp:
		b.WriteString("cmp:")
		u(uint64(e.Op), uint64(e.Register))
		b.Write(e.Data)
	case *expr.Range:
		b.WriteString("range:")
		u(uint64(e.Op), uint64(e.Register))
		b.Write(e.FromData)
		b.WriteByte('-')
		b.Write(e.ToData)
	case *expr.Objref:
		b.WriteString("objref:")
		u(uint64(e.Type))
		b.WriteString(e.Name)
	case *expr.Verdict:
		b.WriteString("verdict:")
		u(uint64(e.Kind))
		b.WriteString(e.Chain)
	case *expr.Limit:
		b.WriteString("limit:")
		u(uint64(e.Type), e.Rate, uint64(e.Unit), uint64(e.Burst), boolBit(e.Over))
	case *expr.Immediate:
		b.WriteString("imm:")
		u(uint64(e.Register))
		b.Write(e.Data)
	case *expr.Dynset:
		b.WriteString("dynset:")
		u(uint64(e.SrcRegKey), uint64(e.SrcRegData), uint64(e.Operation), uint64(e.Timeout), boolBit(e.Invert))
		b.WriteString(e.SetName)
		for _, x := range e.Exprs {
			fingerprint(b, x)
		}
	case *expr.Log:
		b.WriteString("log:")
		u(uint64(e.Key), uint64(e.Group), uint64(e.Snaplen))
		b.Write(e.Data)
	case *expr.Payload:
		b.WriteString("payload:")
		u(uint64(e.DestRegister), uint64(e.Base), uint64(e.Offset), uint64(e.Len))
	case *expr.Meta:
		b.WriteString("meta:")
		u(uint64(e.Key), uint64(e.Register), boolBit(e.SourceRegister))
	default:
		fmt.Fprintf(b, "%T%+v", e, e)
	}
	b.WriteByte(';')
}

func boolBit(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}
