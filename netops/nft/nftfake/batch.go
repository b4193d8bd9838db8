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
		return tx.k.refuse(m, " in a batch")
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
	return tx.k.refuse(m, " in a batch")
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
		return tx.k.refuse(x.m, " by handle (a rename)")
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
