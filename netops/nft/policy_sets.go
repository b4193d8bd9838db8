package nft

import (
	"cmp"
	"math/big"
	"net/netip"
	"slices"

	"github.com/google/nftables"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// The policy table's sets: one nftables set per policy set and family
// (<name>-4, <name>-6), and the encoding of their elements.

const policyFamily = nftables.TableFamilyINet

func policyTableObj() *nftables.Table {
	return &nftables.Table{Name: PolicyTable, Family: policyFamily}
}

// policySetName is the nftables name of set name's family part.
func policySetName(name string, v6 bool) string {
	if v6 {
		return name + "-6"
	}
	return name + "-4"
}

// policySetObj is the nftables set of name's family part.
func policySetObj(name string, kind policymodel.SetKind, comment string, v6 bool) *nftables.Set {
	return policySetObjIn(policyTableObj(), name, kind, comment, v6)
}

// policySetObjIn is policySetObj in table tb.
func policySetObjIn(tb *nftables.Table, name string, kind policymodel.SetKind, comment string, v6 bool) *nftables.Set {
	addr := nftables.TypeIPAddr
	if v6 {
		addr = nftables.TypeIP6Addr
	}
	s := &nftables.Set{Table: tb, Name: policySetName(name, v6), KeyType: addr, Comment: comment}
	switch kind {
	case policymodel.CIDRs:
		s.Interval = true
	case policymodel.Ported:
		s.KeyType, _ = nftables.ConcatSetType(addr, nftables.TypeInetProto, nftables.TypeInetService)
		s.Concatenation = true
	case policymodel.Pairs:
		// pod . destination, each element with its answer's timeout
		s.KeyType, _ = nftables.ConcatSetType(addr, addr)
		s.Concatenation, s.HasTimeout = true, true
	}
	return s
}

// policyElemKey is the key of e in an address set, or with ported in a
// Ported set: address . inet_proto . inet_service, each field padded to
// 32 bits, as the kernel keeps a concatenation. The one encoding of the
// sets' elements: the agent's writes and doctor's lookups both use it.
func policyElemKey(e policymodel.Elem, ported bool) []byte {
	if e.Src.IsValid() { // a Pairs set's: pod . destination
		return append(e.Src.AsSlice(), e.Prefix.Addr().AsSlice()...)
	}
	key := e.Prefix.Addr().AsSlice()
	if ported {
		key = append(key, byte(e.Proto), 0, 0, 0, byte(e.Port>>8), byte(e.Port), 0, 0)
	}
	return key
}

// policyElems splits elems by family and encodes them for a set of kind.
func policyElems(kind policymodel.SetKind, elems []policymodel.Elem) (v4, v6 []nftables.SetElement) {
	if kind == policymodel.CIDRs {
		return intervalElems(elems, false), intervalElems(elems, true)
	}
	for _, e := range elems {
		key := policyElemKey(e, kind == policymodel.Ported)
		if e.Prefix.Addr().Is6() {
			v6 = append(v6, nftables.SetElement{Key: key})
		} else {
			v4 = append(v4, nftables.SetElement{Key: key})
		}
	}
	return v4, v6
}

// intervalElems encodes the prefixes of elems of one family as the start
// and end elements of an interval set (prefixIntervals).
func intervalElems(elems []policymodel.Elem, v6 bool) []nftables.SetElement {
	prefixes := make([]netip.Prefix, len(elems))
	for i, e := range elems {
		prefixes[i] = e.Prefix
	}
	return prefixIntervals(prefixes, v6)
}

// prefixIntervals encodes the prefixes of one family as the start and end
// elements of an interval set, overlapping and adjacent ones merged (the
// kernel refuses overlaps); a range that ends at the top of the address
// space has no end element.
func prefixIntervals(prefixes []netip.Prefix, v6 bool) []nftables.SetElement {
	type span struct{ lo, hi *big.Int } // [lo, hi)
	var spans []span
	for _, p := range prefixes {
		p = p.Masked()
		if p.Addr().Is6() != v6 {
			continue
		}
		lo := new(big.Int).SetBytes(p.Addr().AsSlice())
		size := new(big.Int).Lsh(big.NewInt(1), uint(p.Addr().BitLen()-p.Bits()))
		spans = append(spans, span{lo, new(big.Int).Add(lo, size)})
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Or(a.lo.Cmp(b.lo), a.hi.Cmp(b.hi)) })
	var merged []span
	for _, s := range spans {
		if n := len(merged); n > 0 && s.lo.Cmp(merged[n-1].hi) <= 0 {
			if s.hi.Cmp(merged[n-1].hi) > 0 {
				merged[n-1].hi = s.hi
			}
			continue
		}
		merged = append(merged, s)
	}
	n := 4
	if v6 {
		n = 16
	}
	top := new(big.Int).Lsh(big.NewInt(1), uint(8*n))
	var out []nftables.SetElement
	for _, s := range merged {
		out = append(out, nftables.SetElement{Key: s.lo.FillBytes(make([]byte, n))})
		if s.hi.Cmp(top) < 0 {
			out = append(out, nftables.SetElement{Key: s.hi.FillBytes(make([]byte, n)), IntervalEnd: true})
		}
	}
	return out
}

// addPolicySet queues set s (both families) with its elements; if it
// exists, its elements are replaced.
func (t *txn) addPolicySet(s *policymodel.Set, exists bool) error {
	if s.Kind == policymodel.Pairs && exists {
		return nil // its elements are the DNS proxy's, not the model's
	}
	v4, v6 := policyElems(s.Kind, s.Elems())
	for _, fam := range []struct {
		v6    bool
		elems []nftables.SetElement
	}{{false, v4}, {true, v6}} {
		obj := policySetObj(string(s.ID), s.Kind, policyComment(s.Key), fam.v6)
		if err := t.addSet(obj, nil); err != nil {
			return err
		}
		if exists {
			t.conn().FlushSet(obj)
		}
		if len(fam.elems) > 0 {
			if err := t.conn().SetAddElements(obj, fam.elems); err != nil {
				return err
			}
		}
	}
	return nil
}

// policyElemChange queues elements added to (or deleted from) the
// existing set name of kind.
func (t *txn) policyElemChange(name string, kind policymodel.SetKind, elems []policymodel.Elem, add bool) error {
	v4, v6 := policyElems(kind, elems)
	for _, fam := range []struct {
		v6    bool
		elems []nftables.SetElement
	}{{false, v4}, {true, v6}} {
		if len(fam.elems) == 0 {
			continue
		}
		obj := policySetObj(name, kind, "", fam.v6)
		var err error
		if add {
			err = t.conn().SetAddElements(obj, fam.elems)
		} else {
			err = t.conn().SetDeleteElements(obj, fam.elems)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// addrElems are the elements of single addresses.
func addrElems(addrs []netip.Addr) []policymodel.Elem {
	out := make([]policymodel.Elem, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, policymodel.AddrElem(a))
	}
	return out
}

// policyComment is a set's definition cut to what an nftables comment
// holds.
func policyComment(s string) string {
	if len(s) > 120 {
		return s[:117] + "..."
	}
	return s
}
