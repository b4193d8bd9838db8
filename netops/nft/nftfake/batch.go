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
	if x.destroy() && tx.k.before63 {
		return errno(unix.EINVAL) // a command that kernel does not know
	}
	switch x.typ {
	case unix.NFT_MSG_NEWTABLE:
		return tx.newTable(x)
	case unix.NFT_MSG_DELTABLE, msgDestroyTable:
		return tx.delTable(x)
	}
	for _, k := range kinds {
		if x.typ != k.new && x.typ != k.del && x.typ != k.destroy {
			continue
		}
		t, err := tx.tableOf(x)
		if err != nil {
			return err
		}
		if x.typ == k.new {
			return k.add(tx, t, x)
		}
		return k.remove(tx, t, x)
	}
	return tx.k.refuse(m, " in a batch")
}

// kinds are the objects of a table a batch makes and deletes: their
// messages (NEW, DEL, DESTROY) and how each is applied to the table the
// message names.
var kinds = [...]struct {
	new, del, destroy int
	add, remove       func(tx *txn, t *table, x *msg) error
}{
	{unix.NFT_MSG_NEWCHAIN, unix.NFT_MSG_DELCHAIN, msgDestroyChain, (*txn).newChain, (*txn).delChain},
	{unix.NFT_MSG_NEWRULE, unix.NFT_MSG_DELRULE, msgDestroyRule, (*txn).newRule, (*txn).delRule},
	{unix.NFT_MSG_NEWSET, unix.NFT_MSG_DELSET, msgDestroySet, (*txn).newSet, (*txn).delSet},
	{unix.NFT_MSG_NEWSETELEM, unix.NFT_MSG_DELSETELEM, msgDestroySetElem, (*txn).newElems, (*txn).delElems},
	{unix.NFT_MSG_NEWOBJ, unix.NFT_MSG_DELOBJ, msgDestroyObj, (*txn).newObj, (*txn).delObj},
}

// tableOf finds the table a message about a table's object names (in
// attribute 1: NFTA_CHAIN_TABLE, NFTA_RULE_TABLE, NFTA_SET_TABLE,
// NFTA_SET_ELEM_LIST_TABLE, NFTA_OBJ_TABLE).
func (tx *txn) tableOf(x *msg) (*table, error) {
	name, ok := x.a[1]
	if !ok {
		return nil, errno(unix.EINVAL)
	}
	t := tx.w.table(x.family, str(name))
	if t == nil {
		return nil, errno(unix.ENOENT)
	}
	return t, nil
}

// Attributes golang.org/x/sys does not name (NFTA_TABLE_HANDLE, NFTA_TABLE_USERDATA);
// the others are unix.NFTA_*.
const (
	tableHandle   = 4
	tableUserdata = 6
)

func (tx *txn) newTable(x *msg) error {
	name, ok := x.a[unix.NFTA_TABLE_NAME]
	if !ok || x.family == unix.NFPROTO_UNSPEC {
		return errno(unix.EINVAL)
	}
	if t := tx.w.table(x.family, str(name)); t != nil {
		if x.excl() {
			return errno(unix.EEXIST)
		}
		if f, ok := x.a[unix.NFTA_TABLE_FLAGS]; ok && be32(f) != t.flags {
			t.flags = be32(f)
			tx.changed = true
		}
		return nil
	}
	tx.w.tableH++
	tx.w.tables = append(tx.w.tables, &table{family: x.family, name: str(name), flags: be32(x.a[unix.NFTA_TABLE_FLAGS]),
		handle: tx.w.tableH, userdata: x.a[tableUserdata]})
	tx.changed = true
	return nil
}

func (tx *txn) delTable(x *msg) error {
	_, byName := x.a[unix.NFTA_TABLE_NAME]
	_, byHandle := x.a[tableHandle]
	if !byName && !byHandle { // every table (of the family): nft flush ruleset
		n := len(tx.w.tables)
		tx.w.tables = slices.DeleteFunc(tx.w.tables, func(t *table) bool { return x.family == 0 || t.family == x.family })
		tx.changed = tx.changed || n != len(tx.w.tables)
		return nil
	}
	return del(tx, x, &tx.w.tables, unix.NFTA_TABLE_NAME, tableHandle, func(t *table) bool { return t.family == x.family }, nil)
}

// del deletes from *objs the object x names, by attribute byName, else by
// the handle in attribute byHandle, among those also keeps (nil: all):
// EINVAL when x names none, ENOENT when there is none (nil for a
// DESTROY), EBUSY while busy reports it in use (nil: never).
func del[T interface{ key() (string, uint64) }](tx *txn, x *msg, objs *[]T, byName, byHandle uint16, also, busy func(T) bool) error {
	name, hasName := x.a[byName]
	h, hasHandle := x.a[byHandle]
	if !hasName && !hasHandle {
		return errno(unix.EINVAL)
	}
	i := slices.IndexFunc(*objs, func(o T) bool {
		n, oh := o.key()
		return (hasName && n == str(name) || !hasName && oh == be64(h)) && (also == nil || also(o))
	})
	if i < 0 {
		if x.destroy() {
			return nil
		}
		return errno(unix.ENOENT)
	}
	if busy != nil && busy((*objs)[i]) {
		return errno(unix.EBUSY)
	}
	*objs = slices.Delete(*objs, i, i+1)
	tx.changed = true
	return nil
}

// Attributes golang.org/x/sys does not name (NFTA_CHAIN_FLAGS, NFTA_CHAIN_USERDATA).
const (
	chainFlags    = 10
	chainUserdata = 12
)

func (tx *txn) newChain(t *table, x *msg) error {
	if _, ok := x.a[unix.NFTA_CHAIN_HANDLE]; ok {
		return tx.k.refuse(x.m, " by handle (a rename)")
	}
	name, ok := x.a[unix.NFTA_CHAIN_NAME]
	if !ok || len(name) > 256 {
		return errno(unix.EINVAL)
	}
	var hook map[uint16][]byte
	if h, ok := x.a[unix.NFTA_CHAIN_HOOK]; ok {
		var err error
		if hook, err = attrs(h); err != nil {
			return errno(unix.EINVAL)
		}
		if _, ok := hook[unix.NFTA_HOOK_HOOKNUM]; !ok {
			return errno(unix.EINVAL)
		}
	}
	_, hasPolicy := x.a[unix.NFTA_CHAIN_POLICY]
	policy := be32(x.a[unix.NFTA_CHAIN_POLICY])
	if hasPolicy && policy != nfAccept && policy != nfDrop {
		return errno(unix.EINVAL)
	}
	if c := t.chain(str(name)); c != nil {
		if x.excl() {
			return errno(unix.EEXIST)
		}
		if hook != nil && (!c.base || be32(hook[unix.NFTA_HOOK_HOOKNUM]) != c.hooknum || int32(be32(hook[unix.NFTA_HOOK_PRIORITY])) != c.prio) {
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
		c.base, c.hooknum, c.prio, c.dev = true, be32(hook[unix.NFTA_HOOK_HOOKNUM]), int32(be32(hook[unix.NFTA_HOOK_PRIORITY])), hook[unix.NFTA_HOOK_DEV]
		c.typ, c.policy = "filter", nfAccept
		if ty, ok := x.a[unix.NFTA_CHAIN_TYPE]; ok {
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

func (tx *txn) delChain(t *table, x *msg) error {
	return del(tx, x, &t.chains, unix.NFTA_CHAIN_NAME, unix.NFTA_CHAIN_HANDLE, nil, func(c *chain) bool {
		if x.flags&0x100 != 0 && len(c.rules) > 0 { // NLM_F_NONREC
			return true
		}
		saved := c.rules
		c.rules = nil // its own rules do not count
		defer func() { c.rules = saved }()
		return t.chainUse(c.name) > 0
	})
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
