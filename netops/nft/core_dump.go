package nft

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
)

// What reconcile reads of the kernel, and how it compares that with a
// spec (core.go).

// tableState is what the kernel holds of a tableSpec's table.
type tableState struct {
	exists     bool
	chains     map[string]*nftables.Chain
	rules      map[string][]*nftables.Rule // of the spec's chains that are there
	sets       map[string]*nftables.Set
	elems      map[string][]nftElem // of the spec's own (not kept) sets
	flowtables map[string]*nftables.Flowtable
	counters   map[string]bool // named counter objects, read when the spec has counters
	// marks are the chain marks in the spec's mark set, by their first 8
	// bytes (the chain's name's hash; core_marks.go).
	marks map[string][][]byte
	// uses are the chains' use counts (read when the spec has a mark
	// set), wantUses the spec's (core_chains.go).
	uses, wantUses map[string]uint32
	// audit is the spec's (core_marks.go).
	audit markAudit
}

// dumpTable reads what the kernel holds of s: a get of the table, then,
// when it is there, a dump of its sets (when s has sets or owns the
// table) and flowtables (when s has some), of its chains (of every chain
// of the family when s owns the table, to find those it does not name; a
// get of each named one else), of the rules of each chain s names and of
// the elements of each set whose elements are s's.
func (h *Handle) dumpTable(s *tableSpec) (*tableState, error) {
	st := &tableState{
		chains: map[string]*nftables.Chain{}, rules: map[string][]*nftables.Rule{},
		sets: map[string]*nftables.Set{}, elems: map[string][]nftElem{}, flowtables: map[string]*nftables.Flowtable{},
		counters: map[string]bool{},
	}
	ok, err := h.nftTableExists(uint8(s.table.Family), s.table.Name)
	if err != nil || !ok {
		return st, err
	}
	st.exists = true
	if s.owned || len(s.sets) > 0 {
		sets, err := consistently(h, func() ([]*nftables.Set, error) { return h.nft.GetSets(s.table) })
		if err != nil {
			return nil, err
		}
		for _, set := range sets {
			st.sets[set.Name] = set
		}
	}
	if err := h.dumpChains(s, st); err != nil {
		return nil, err
	}
	if len(s.flowtables) > 0 { // (a flowtable someone adds to a table without one stays)
		fts, err := consistently(h, func() ([]*nftables.Flowtable, error) { return h.nft.ListFlowtables(s.table) })
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return nil, err
		}
		for _, ft := range fts {
			st.flowtables[ft.Name] = ft
		}
	}
	if err := h.readMarks(s, st); err != nil {
		return nil, fmt.Errorf("list the chain marks: %w", err)
	}
	if err := h.dumpSpecRules(s, st); err != nil {
		return nil, err
	}
	if s.counters != nil {
		objs, err := consistently(h, func() ([]nftables.Obj, error) { return h.nft.GetObjects(s.table) })
		if err != nil {
			return nil, fmt.Errorf("list counters: %w", err)
		}
		for _, o := range objs {
			if c, ok := o.(*nftables.CounterObj); ok {
				st.counters[c.Name] = true
			}
		}
	}
	for _, ss := range s.sets {
		if _, ok := st.sets[ss.set.Name]; !ok || ss.kept {
			continue
		}
		elems, err := h.dumpFamilyElems(s.table.Family, s.table.Name, ss.set.Name)
		if err != nil {
			return nil, err
		}
		st.elems[ss.set.Name] = elems
	}
	return st, nil
}

// dumpSpecRules fills st.rules with the rules of the chains of s that
// are there and not marked (core_marks.go): one dump of the table's rules
// when s owns it and it has a few chains, else one dump of each chain's
// (a shared table, iptables-nft's,
// holds others' rules; and the kernel walks a table's rules from its first
// at each part of a dump, ~32 KiB, so that one dump of a table of 70,000
// rules took 5 s where a dump of each of its chains takes a fraction).
func (h *Handle) dumpSpecRules(s *tableSpec, st *tableState) error {
	if s.owned && len(st.chains) <= tableDumpChains {
		if len(st.chains) == 0 {
			return nil
		}
		rules, err := h.dumpRules(s.table, "")
		if err != nil {
			return err
		}
		for _, cs := range s.chains {
			if _, ok := st.chains[cs.name]; ok {
				st.rules[cs.name] = rules[cs.name]
			}
		}
		return nil
	}
	for _, cs := range s.chains {
		if _, ok := st.chains[cs.name]; !ok || st.marked(&cs) {
			continue
		}
		rules, err := h.dumpRules(s.table, cs.name)
		if err != nil {
			return fmt.Errorf("chain %s: %w", cs.name, err)
		}
		st.rules[cs.name] = rules[cs.name]
	}
	return nil
}

// tableDumpChains is the most chains a table has that dumpSpecRules
// reads in one dump.
const tableDumpChains = 64

// dumpChains fills st.chains: every chain of the table when s owns it,
// else those s names.
func (h *Handle) dumpChains(s *tableSpec, st *tableState) error {
	if s.owned && s.marks != nil {
		chains, uses, err := h.dumpTableChains(s.table)
		if err != nil {
			return err
		}
		st.chains, st.uses = chains, uses
		return nil
	}
	if s.owned {
		chains, err := consistently(h, func() ([]*nftables.Chain, error) { return h.nft.ListChainsOfTableFamily(s.table.Family) })
		if err != nil {
			return err
		}
		for _, ch := range chains {
			if ch.Table != nil && ch.Table.Name == s.table.Name {
				st.chains[ch.Name] = ch
			}
		}
		return nil
	}
	for _, cs := range s.chains {
		ch, err := h.nftGetChain(uint8(s.table.Family), s.table.Name, cs.name)
		if err != nil {
			return err
		}
		if ch != nil {
			st.chains[cs.name] = ch
		}
	}
	return nil
}

// sameRule reports whether a rule listed from the kernel is want: the
// same comment and the same expressions, each compared by what it does
// (exprKey), not by the registers and handles the kernel fills in.
// google/nftables decodes no `rt` and no `byteorder` expression (it drops
// them), so those are left out of want too: a rule that has one says what
// it does in its comment (egress: Via's next hop; the fast path: its
// threshold).
func sameRule(have, want *nftables.Rule) bool {
	hc, _ := userdata.GetString(have.UserData, userdata.TypeComment)
	wc, _ := userdata.GetString(want.UserData, userdata.TypeComment)
	return hc == wc && slices.Equal(exprKeys(have.Exprs), exprKeys(want.Exprs))
}

// exprKeys describes exprs, one string each, leaving out those
// google/nftables does not list back.
func exprKeys(exprs []expr.Any) []string {
	out := make([]string, 0, len(exprs))
	for _, e := range exprs {
		if k, ok := exprKey(e); ok {
			out = append(out, k)
		}
	}
	return out
}

// exprKey describes what e does; false for what the kernel's list does
// not carry back through google/nftables (rt, byteorder).
func exprKey(e expr.Any) (string, bool) {
	switch e := e.(type) {
	case *expr.Rt, *expr.Byteorder:
		return "", false
	case *expr.Counter:
		return "counter", true // its values change
	case *expr.Meta:
		return fmt.Sprintf("meta %d set=%t r%d", e.Key, e.SourceRegister, reg(e.Register)), true
	case *expr.Cmp:
		return fmt.Sprintf("cmp r%d %d %x", reg(e.Register), e.Op, e.Data), true
	case *expr.Range:
		return fmt.Sprintf("range r%d %d %x %x", reg(e.Register), e.Op, e.FromData, e.ToData), true
	case *expr.Payload:
		return fmt.Sprintf("payload %d r%d r%d %d %d %d csum %d %d", e.OperationType, reg(e.DestRegister), reg(e.SourceRegister),
			e.Base, e.Offset, e.Len, e.CsumType, e.CsumOffset), true
	case *expr.Bitwise:
		return fmt.Sprintf("bitwise r%d r%d %d %x %x", reg(e.SourceRegister), reg(e.DestRegister), e.Len, e.Mask, e.Xor), true
	case *expr.Lookup:
		return fmt.Sprintf("lookup r%d %s map=%t r%d invert=%t", reg(e.SourceRegister), e.SetName, e.IsDestRegSet, reg(e.DestRegister), e.Invert), true
	case *expr.Immediate:
		return fmt.Sprintf("immediate r%d %x", reg(e.Register), e.Data), true
	case *expr.Verdict:
		return fmt.Sprintf("verdict %d %s", e.Kind, e.Chain), true
	case *expr.Ct:
		if e.SourceRegister || e.Register == 0 {
			// `ct mark set`: google/nftables decodes no NFTA_CT_SREG, so
			// a listed one has neither register (a load has its DREG).
			return fmt.Sprintf("ct %d set", e.Key), true
		}
		return fmt.Sprintf("ct %d r%d dir %d", e.Key, reg(e.Register), e.Direction), true
	case *expr.Objref:
		return fmt.Sprintf("objref %d %s", e.Type, e.Name), true
	case *expr.Limit:
		return fmt.Sprintf("limit %d %d/%d burst %d over=%t", e.Type, e.Rate, e.Unit, e.Burst, e.Over), true
	case *expr.Log:
		return fmt.Sprintf("log group %d snaplen %d level %d flags %d %q", e.Group, e.Snaplen, e.Level, e.Flags, e.Data), true
	case *expr.Dynset:
		return fmt.Sprintf("dynset %d @%s r%d r%d timeout %s invert=%t %q", e.Operation, e.SetName, reg(e.SrcRegKey), reg(e.SrcRegData),
			e.Timeout, e.Invert, exprKeys(e.Exprs)), true
	case *expr.NAT:
		return fmt.Sprintf("nat %d %d %t %t %t", e.Type, e.Family, e.Random, e.FullyRandom, e.Persistent), true
	case *expr.Masq:
		return fmt.Sprintf("masq %t %t %t", e.Random, e.FullyRandom, e.Persistent), true
	case *expr.FlowOffload:
		return "flow add " + e.Name, true
	}
	return strings.TrimPrefix(fmt.Sprintf("%T", e), "*expr."), true
}

// reg is register r as the kernel keeps it, in 32-bit words: a 128-bit
// register (NFT_REG_1..4) and its first 32-bit one (NFT_REG32_00 for
// NFT_REG_1) are the same, and the kernel lists it back as the former.
func reg(r uint32) uint32 {
	if r >= unix.NFT_REG32_00 {
		return r - unix.NFT_REG32_00 + 4
	}
	return r * 4
}

// sameSetType reports whether the kernel's set have is of want's kind:
// the same flags, and the same key type (google/nftables lists a verdict
// map's key type as the verdict type, so a map's key is left out).
func sameSetType(have, want *nftables.Set) bool {
	if have.IsMap != want.IsMap || have.Interval != want.Interval || have.HasTimeout != want.HasTimeout || have.Concatenation != want.Concatenation {
		return false
	}
	if want.IsMap {
		return have.DataType.Bytes == want.DataType.Bytes || want.DataType.Name == nftables.TypeVerdict.Name
	}
	return have.KeyType.GetNFTMagic() == want.KeyType.GetNFTMagic()
}

// diffElems compares a set's elements (have, the kernel's) with want: the
// elements to add and to delete, by key; whole when an element's data
// differs (the set is then filled again whole).
func diffElems(have []nftElem, want []nftables.SetElement) (add, del []nftables.SetElement, whole bool) {
	key := func(k []byte, end bool) string {
		if end {
			return "end " + string(k)
		}
		return string(k)
	}
	wantBy := make(map[string]nftables.SetElement, len(want))
	for _, e := range want {
		wantBy[key(e.Key, e.IntervalEnd)] = e
	}
	haveBy := make(map[string]nftElem, len(have))
	for _, e := range have {
		k := key(e.key, e.intervalEnd)
		haveBy[k] = e
		w, ok := wantBy[k]
		switch {
		case !ok:
			del = append(del, nftables.SetElement{Key: e.key, IntervalEnd: e.intervalEnd})
		case w.VerdictData != nil && w.VerdictData.Chain != e.jump, w.VerdictData == nil && !bytes.Equal(w.Val, e.data):
			whole = true
		}
	}
	for _, k := range slices.Sorted(maps.Keys(wantBy)) {
		if _, ok := haveBy[k]; !ok {
			add = append(add, wantBy[k])
		}
	}
	return add, del, whole
}

// sortedKeys are m's keys, sorted.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// sortedCopy is a sorted copy of s.
func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
