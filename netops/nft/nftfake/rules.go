package nftfake

import (
	"slices"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Rules: NEWRULE (append, insert, at a position, replace) with what its
// expressions refer to checked, and DELRULE (one, a chain's, a table's).

// Attributes golang.org/x/sys does not name (NFTA_RULE_POSITION_ID, NFTA_RULE_CHAIN_ID).
const (
	rulePositionID = 10
	ruleChainID    = 11
)

func (tx *txn) newRule(t *table, x *msg) error {
	if _, ok := x.a[ruleChainID]; ok {
		return tx.k.refuse(x.m, " with NFTA_RULE_CHAIN_ID")
	}
	if _, ok := x.a[rulePositionID]; ok {
		return tx.k.refuse(x.m, " with NFTA_RULE_POSITION_ID")
	}
	cn, ok := x.a[unix.NFTA_RULE_CHAIN]
	if !ok {
		return errno(unix.EINVAL)
	}
	c := t.chain(str(cn))
	if c == nil {
		return errno(unix.ENOENT)
	}
	at := -1 // where the new rule goes
	replace := false
	if h, ok := x.a[unix.NFTA_RULE_HANDLE]; ok {
		i := slices.IndexFunc(c.rules, func(r *rule) bool { return r.handle == be64(h) })
		switch {
		case i < 0:
			return errno(unix.ENOENT)
		case x.excl():
			return errno(unix.EEXIST)
		case x.flags&netlink.Replace == 0:
			return errno(unix.EOPNOTSUPP)
		}
		at, replace = i, true
	} else if p, ok := x.a[unix.NFTA_RULE_POSITION]; ok {
		i := slices.IndexFunc(c.rules, func(r *rule) bool { return r.handle == be64(p) })
		if i < 0 {
			return errno(unix.ENOENT)
		}
		at = i
		if x.flags&netlink.Append != 0 {
			at = i + 1
		}
	} else if x.flags&netlink.Append != 0 {
		at = len(c.rules)
	} else {
		at = 0
	}
	r := &rule{userdata: x.a[unix.NFTA_RULE_USERDATA], compat: x.a[unix.NFTA_RULE_COMPAT]}
	var err error
	if r.exprs, err = tx.ruleExprs(t, x.family, r, x.a[unix.NFTA_RULE_EXPRESSIONS]); err != nil {
		return err
	}
	t.hgen++
	r.handle = t.hgen
	if replace {
		c.rules = slices.Clone(c.rules)
		c.rules[at] = r
	} else {
		c.rules = slices.Insert(slices.Clone(c.rules), at, r)
	}
	tx.changed = true
	if x.flags&unix.NLM_F_ECHO != 0 {
		i := slices.Index(c.rules, r)
		em := ruleMsg(x.family, t, c, i, tx.gen)
		em.Header.Flags = x.flags & (netlink.Create | netlink.Append | netlink.Excl | netlink.Replace)
		em.Header.Sequence, em.Header.PID = x.m.Header.Sequence, x.m.Header.PID
		tx.echo = append(tx.echo, []netlink.Message{em})
	}
	return nil
}

const (
	nftJump = 0xfffffffd // NFT_JUMP
	nftGoto = 0xfffffffc // NFT_GOTO
)

// ruleExprs checks a rule's expressions (what it jumps to, the sets and
// objects it names must exist), notes its references in r, and returns
// them with set IDs resolved to the sets' names.
func (tx *txn) ruleExprs(t *table, family uint8, r *rule, b []byte) ([]byte, error) {
	items, err := netlink.UnmarshalAttributes(b)
	if err != nil {
		return nil, errno(unix.EINVAL)
	}
	for i, it := range items {
		e, err := attrs(it.Data)
		if err != nil {
			return nil, errno(unix.EINVAL)
		}
		name := str(e[1]) // NFTA_EXPR_NAME
		d, err := netlink.UnmarshalAttributes(e[2])
		if err != nil {
			return nil, errno(unix.EINVAL)
		}
		da := map[uint16][]byte{}
		for _, a := range d {
			da[a.Type&0x3fff] = a.Data
		}
		var setAttr, idAttr uint16
		switch name {
		case "immediate":
			if v, ok := da[2]; ok { // NFTA_IMMEDIATE_DATA
				if err := tx.verdict(t, r, v); err != nil {
					return nil, err
				}
			}
		case "lookup":
			setAttr, idAttr = 1, 4
		case "dynset":
			setAttr, idAttr = 1, 2
		case "objref":
			if n, ok := da[2]; ok { // NFTA_OBJREF_IMM_NAME
				if t.obj(str(n), be32(da[1])) == nil {
					return nil, errno(unix.ENOENT)
				}
				r.objs = append(r.objs, str(n))
			}
			setAttr, idAttr = 4, 5
		case "flow_offload":
			return nil, errno(unix.ENOENT) // no flowtables here
		}
		if setAttr == 0 {
			continue
		}
		_, byName := da[setAttr]
		_, byID := da[idAttr]
		if !byName && !byID {
			continue
		}
		s := t.set(str(da[setAttr]))
		if s == nil && byID {
			s = tx.setIDs[be32(da[idAttr])]
		}
		if s == nil {
			return nil, errno(unix.ENOENT)
		}
		r.sets = append(r.sets, s.name)
		// The kernel names the set it bound, not the ID.
		d = slices.DeleteFunc(d, func(a netlink.Attribute) bool { return a.Type&0x3fff == idAttr || a.Type&0x3fff == setAttr })
		d = append([]netlink.Attribute{{Type: setAttr, Data: cstr(s.name)}}, d...)
		items[i].Length = 0 // recomputed for the new data
		items[i].Data = mustAttrs(netlink.Attribute{Type: 1, Data: e[1]}, netlink.Attribute{Type: 2 | netlink.Nested, Data: mustAttrs(d...)})
	}
	return mustAttrs(items...), nil
}

// verdict checks the data of an immediate or a verdict map element (v:
// NFTA_DATA_*): a jump or goto names an existing regular chain of t. It
// notes the jump in r (if not nil) and returns the chain.
func (tx *txn) verdict(t *table, r *rule, v []byte) error {
	da, err := attrs(v)
	if err != nil {
		return errno(unix.EINVAL)
	}
	vb, ok := da[unix.NFTA_DATA_VERDICT]
	if !ok {
		return nil
	}
	va, err := attrs(vb)
	if err != nil {
		return errno(unix.EINVAL)
	}
	code := be32(va[unix.NFTA_VERDICT_CODE])
	if code != nftJump && code != nftGoto {
		return nil
	}
	cn, ok := va[unix.NFTA_VERDICT_CHAIN]
	if !ok {
		return errno(unix.EINVAL)
	}
	c := t.chain(str(cn))
	if c == nil {
		return errno(unix.ENOENT)
	}
	if c.base {
		return errno(unix.EOPNOTSUPP)
	}
	if r != nil {
		r.jumps = append(r.jumps, c.name)
	}
	return nil
}

// jumpOf returns the chain the verdict data v jumps or goes to ("" for
// none).
func jumpOf(v []byte) string {
	da, _ := attrs(v)
	va, _ := attrs(da[unix.NFTA_DATA_VERDICT])
	if c := be32(va[unix.NFTA_VERDICT_CODE]); c == nftJump || c == nftGoto {
		return str(va[unix.NFTA_VERDICT_CHAIN])
	}
	return ""
}

func (tx *txn) delRule(t *table, x *msg) error {
	chains := t.chains
	if cn, ok := x.a[unix.NFTA_RULE_CHAIN]; ok {
		c := t.chain(str(cn))
		if c == nil {
			if x.destroy() {
				return nil
			}
			return errno(unix.ENOENT)
		}
		chains = []*chain{c}
	} else if _, ok := x.a[unix.NFTA_RULE_HANDLE]; ok {
		return errno(unix.EINVAL)
	}
	if _, ok := x.a[unix.NFTA_RULE_ID]; ok {
		return tx.k.refuse(x.m, " by NFTA_RULE_ID")
	}
	if h, ok := x.a[unix.NFTA_RULE_HANDLE]; ok {
		c := chains[0]
		i := slices.IndexFunc(c.rules, func(r *rule) bool { return r.handle == be64(h) })
		if i < 0 {
			if x.destroy() {
				return nil
			}
			return errno(unix.ENOENT)
		}
		c.rules = slices.Delete(slices.Clone(c.rules), i, i+1)
		tx.changed = true
		return nil
	}
	for _, c := range chains { // flush
		if len(c.rules) > 0 {
			c.rules, tx.changed = nil, true
		}
	}
	return nil
}
