package nftfake

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// txn is one batch being applied to a copy of the Kernel's world.
type txn struct {
	k       *Kernel
	w       *world
	now     time.Time
	setIDs  map[uint32]*set // the sets this batch made, by NFTA_SET_ID
	changed bool            // something to commit (a new generation)
	gen     uint32          // the generation the batch makes
	echo    [][]netlink.Message
}

// msg is one message of a batch, decoded.
type msg struct {
	m      netlink.Message
	typ    int
	family uint8
	flags  netlink.HeaderFlags
	a      map[uint16][]byte
}

func (x *msg) excl() bool { return x.flags&netlink.Excl != 0 }

// destroy reports whether the message is a DESTROY*, which ignores what
// is missing.
func (x *msg) destroy() bool { return x.typ >= msgDestroyTable && x.typ <= msgDestroyObj }

// apply applies one message of the batch.
func (tx *txn) apply(m netlink.Message) error {
	if int(m.Header.Type)>>8 != unix.NFNL_SUBSYS_NFTABLES || len(m.Data) < 4 {
		return tx.k.unmodeled1(m, " in a batch")
	}
	a, err := attrs(m.Data[4:])
	if err != nil {
		return errno(unix.EINVAL)
	}
	x := &msg{m: m, typ: int(m.Header.Type) & 0xff, family: m.Data[0], flags: m.Header.Flags, a: a}
	switch x.typ {
	case unix.NFT_MSG_NEWTABLE:
		return tx.newTable(x)
	case unix.NFT_MSG_DELTABLE, msgDestroyTable:
		return tx.delTable(x)
	case unix.NFT_MSG_NEWCHAIN:
		return tx.newChain(x)
	case unix.NFT_MSG_DELCHAIN, msgDestroyChain:
		return tx.delChain(x)
	case unix.NFT_MSG_NEWRULE:
		return tx.newRule(x)
	case unix.NFT_MSG_DELRULE, msgDestroyRule:
		return tx.delRule(x)
	case unix.NFT_MSG_NEWSET:
		return tx.newSet(x)
	case unix.NFT_MSG_DELSET, msgDestroySet:
		return tx.delSet(x)
	case unix.NFT_MSG_NEWSETELEM:
		return tx.newElems(x)
	case unix.NFT_MSG_DELSETELEM, msgDestroySetElem:
		return tx.delElems(x)
	case unix.NFT_MSG_NEWOBJ:
		return tx.newObj(x)
	case unix.NFT_MSG_DELOBJ, msgDestroyObj:
		return tx.delObj(x)
	}
	return tx.k.unmodeled1(m, " in a batch")
}

// tableOf finds the table the message names in attribute attr.
func (tx *txn) tableOf(x *msg, attr uint16) (*table, error) {
	name, ok := x.a[attr]
	if !ok {
		return nil, errno(unix.EINVAL)
	}
	t := tx.w.table(x.family, str(name))
	if t == nil {
		return nil, errno(unix.ENOENT)
	}
	return t, nil
}

const (
	tableName     = 1
	tableFlags    = 2
	tableUserdata = 6
)

func (tx *txn) newTable(x *msg) error {
	name, ok := x.a[tableName]
	if !ok || x.family == unix.NFPROTO_UNSPEC {
		return errno(unix.EINVAL)
	}
	if t := tx.w.table(x.family, str(name)); t != nil {
		if x.excl() {
			return errno(unix.EEXIST)
		}
		if f, ok := x.a[tableFlags]; ok && be32(f) != t.flags {
			t.flags = be32(f)
			tx.changed = true
		}
		return nil
	}
	tx.w.tableH++
	tx.w.tables = append(tx.w.tables, &table{family: x.family, name: str(name), flags: be32(x.a[tableFlags]),
		handle: tx.w.tableH, userdata: x.a[tableUserdata]})
	tx.changed = true
	return nil
}

func (tx *txn) delTable(x *msg) error {
	name, byName := x.a[tableName]
	h, byHandle := x.a[4]
	if !byName && !byHandle { // every table (of the family): nft flush ruleset
		n := len(tx.w.tables)
		tx.w.tables = slices.DeleteFunc(tx.w.tables, func(t *table) bool { return x.family == 0 || t.family == x.family })
		tx.changed = tx.changed || n != len(tx.w.tables)
		return nil
	}
	i := slices.IndexFunc(tx.w.tables, func(t *table) bool {
		return t.family == x.family && (byName && t.name == str(name) || !byName && t.handle == be64(h))
	})
	if i < 0 {
		if x.destroy() {
			return nil
		}
		return errno(unix.ENOENT)
	}
	tx.w.tables = slices.Delete(tx.w.tables, i, i+1)
	tx.changed = true
	return nil
}

const (
	chainTable    = 1
	chainHandle   = 2
	chainName     = 3
	chainHook     = 4
	chainPolicy   = 5
	chainType     = 7
	chainFlags    = 10
	chainUserdata = 12

	hookNum  = 1
	hookPrio = 2
	hookDev  = 3
)

func (tx *txn) newChain(x *msg) error {
	t, err := tx.tableOf(x, chainTable)
	if err != nil {
		return err
	}
	if _, ok := x.a[chainHandle]; ok {
		return tx.k.unmodeled1(x.m, " by handle (a rename)")
	}
	name, ok := x.a[chainName]
	if !ok || len(name) > 256 {
		return errno(unix.EINVAL)
	}
	var hook map[uint16][]byte
	if h, ok := x.a[chainHook]; ok {
		if hook, err = attrs(h); err != nil {
			return errno(unix.EINVAL)
		}
		if _, ok := hook[hookNum]; !ok {
			return errno(unix.EINVAL)
		}
	}
	_, hasPolicy := x.a[chainPolicy]
	policy := be32(x.a[chainPolicy])
	if hasPolicy && policy != nfAccept && policy != nfDrop {
		return errno(unix.EINVAL)
	}
	if c := t.chain(str(name)); c != nil {
		if x.excl() {
			return errno(unix.EEXIST)
		}
		if hook != nil && (!c.base || be32(hook[hookNum]) != c.hooknum || int32(be32(hook[hookPrio])) != c.prio) {
			return errno(unix.EBUSY)
		}
		if hasPolicy {
			if !c.base {
				return errno(unix.EOPNOTSUPP)
			}
			c.policy = policy
		}
		tx.changed = true
		return nil
	}
	c := &chain{name: str(name), userdata: x.a[chainUserdata]}
	if hook != nil {
		c.base, c.hooknum, c.prio, c.dev = true, be32(hook[hookNum]), int32(be32(hook[hookPrio])), hook[hookDev]
		c.typ, c.policy = "filter", nfAccept
		if ty, ok := x.a[chainType]; ok {
			c.typ = str(ty)
		}
		if hasPolicy {
			c.policy = policy
		}
	} else if hasPolicy {
		return errno(unix.EOPNOTSUPP)
	}
	t.hgen++
	c.handle = t.hgen
	t.chains = append(t.chains, c)
	tx.changed = true
	return nil
}

func (tx *txn) delChain(x *msg) error {
	t, err := tx.tableOf(x, chainTable)
	if err != nil {
		if x.destroy() && err.(*kerr).errno == unix.ENOENT {
			return nil
		}
		return err
	}
	i := -1
	if name, ok := x.a[chainName]; ok {
		i = slices.IndexFunc(t.chains, func(c *chain) bool { return c.name == str(name) })
	} else if h, ok := x.a[chainHandle]; ok {
		i = slices.IndexFunc(t.chains, func(c *chain) bool { return c.handle == be64(h) })
	} else {
		return errno(unix.EINVAL)
	}
	if i < 0 {
		if x.destroy() {
			return nil
		}
		return errno(unix.ENOENT)
	}
	c := t.chains[i]
	if x.flags&0x100 != 0 && len(c.rules) > 0 { // NLM_F_NONREC
		return errno(unix.EBUSY)
	}
	saved := c.rules
	c.rules = nil // its own rules go first
	if t.chainUse(c.name) > 0 {
		c.rules = saved
		return errno(unix.EBUSY)
	}
	t.chains = slices.Delete(t.chains, i, i+1)
	tx.changed = true
	return nil
}

const (
	ruleTable      = 1
	ruleChain      = 2
	ruleHandle     = 3
	ruleExprs      = 4
	ruleCompat     = 5
	rulePosition   = 6
	ruleUserdata   = 7
	ruleID         = 9
	rulePositionID = 10
	ruleChainID    = 11
)

func (tx *txn) newRule(x *msg) error {
	t, err := tx.tableOf(x, ruleTable)
	if err != nil {
		return err
	}
	if _, ok := x.a[ruleChainID]; ok {
		return tx.k.unmodeled1(x.m, " with NFTA_RULE_CHAIN_ID")
	}
	if _, ok := x.a[rulePositionID]; ok {
		return tx.k.unmodeled1(x.m, " with NFTA_RULE_POSITION_ID")
	}
	cn, ok := x.a[ruleChain]
	if !ok {
		return errno(unix.EINVAL)
	}
	c := t.chain(str(cn))
	if c == nil {
		return errno(unix.ENOENT)
	}
	at := -1 // where the new rule goes
	replace := false
	if h, ok := x.a[ruleHandle]; ok {
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
	} else if p, ok := x.a[rulePosition]; ok {
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
	r := &rule{userdata: x.a[ruleUserdata], compat: x.a[ruleCompat]}
	if r.exprs, err = tx.ruleExprs(t, x.family, r, x.a[ruleExprs]); err != nil {
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
	verdictCode  = 1
	verdictChain = 2
	dataValue    = 1
	dataVerdict  = 2
	nftJump      = 0xfffffffd // NFT_JUMP
	nftGoto      = 0xfffffffc // NFT_GOTO
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
	vb, ok := da[dataVerdict]
	if !ok {
		return nil
	}
	va, err := attrs(vb)
	if err != nil {
		return errno(unix.EINVAL)
	}
	code := be32(va[verdictCode])
	if code != nftJump && code != nftGoto {
		return nil
	}
	cn, ok := va[verdictChain]
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
	va, _ := attrs(da[dataVerdict])
	if c := be32(va[verdictCode]); c == nftJump || c == nftGoto {
		return str(va[verdictChain])
	}
	return ""
}

func (tx *txn) delRule(x *msg) error {
	t, err := tx.tableOf(x, ruleTable)
	if err != nil {
		if x.destroy() && err.(*kerr).errno == unix.ENOENT {
			return nil
		}
		return err
	}
	chains := t.chains
	if cn, ok := x.a[ruleChain]; ok {
		c := t.chain(str(cn))
		if c == nil {
			if x.destroy() {
				return nil
			}
			return errno(unix.ENOENT)
		}
		chains = []*chain{c}
	} else if _, ok := x.a[ruleHandle]; ok {
		return errno(unix.EINVAL)
	}
	if _, ok := x.a[ruleID]; ok {
		return tx.k.unmodeled1(x.m, " by NFTA_RULE_ID")
	}
	if h, ok := x.a[ruleHandle]; ok {
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

const (
	objTable    = 1
	objName     = 2
	objType     = 3
	objData     = 4
	objHandle   = 6
	objUserdata = 8

	objCounter     = 1
	counterBytes   = 1
	counterPackets = 2
)

func (tx *txn) newObj(x *msg) error {
	t, err := tx.tableOf(x, objTable)
	if err != nil {
		return err
	}
	name, ok1 := x.a[objName]
	typ, ok2 := x.a[objType]
	data, ok3 := x.a[objData]
	if !ok1 || !ok2 || !ok3 {
		return errno(unix.EINVAL)
	}
	if o := t.obj(str(name), be32(typ)); o != nil {
		switch {
		case x.excl():
			return errno(unix.EEXIST)
		case x.flags&netlink.Replace != 0:
			return errno(unix.EOPNOTSUPP)
		}
		return nil // a counter has no update
	}
	o := &obj{name: str(name), typ: be32(typ), data: data, userdata: x.a[objUserdata]}
	if o.typ == objCounter {
		ca, err := attrs(data)
		if err != nil {
			return errno(unix.EINVAL)
		}
		o.bytes, o.packets = be64(ca[counterBytes]), be64(ca[counterPackets])
	}
	t.hgen++
	o.handle = t.hgen
	t.objs = append(t.objs, o)
	tx.changed = true
	return nil
}

func (tx *txn) delObj(x *msg) error {
	t, err := tx.tableOf(x, objTable)
	if err != nil {
		if x.destroy() && err.(*kerr).errno == unix.ENOENT {
			return nil
		}
		return err
	}
	typ := be32(x.a[objType])
	i := -1
	if name, ok := x.a[objName]; ok {
		i = slices.IndexFunc(t.objs, func(o *obj) bool { return o.name == str(name) && o.typ == typ })
	} else if h, ok := x.a[objHandle]; ok {
		i = slices.IndexFunc(t.objs, func(o *obj) bool { return o.handle == be64(h) && o.typ == typ })
	} else {
		return errno(unix.EINVAL)
	}
	if i < 0 {
		if x.destroy() {
			return nil
		}
		return errno(unix.ENOENT)
	}
	if t.objUse(t.objs[i].name) > 0 {
		return errno(unix.EBUSY)
	}
	t.objs = slices.Delete(t.objs, i, i+1)
	tx.changed = true
	return nil
}

// setName gives an anonymous set's template name ("__set%d") its number.
func setName(t *table, name string) string {
	if !strings.Contains(name, "%d") {
		return name
	}
	for i := 0; ; i++ {
		n := strings.Replace(name, "%d", fmt.Sprint(i), 1)
		if t.set(n) == nil {
			return n
		}
	}
}

// A base chain's policies.
const (
	nfDrop   = 0
	nfAccept = 1
)
