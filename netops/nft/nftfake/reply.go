package nftfake

import (
	"os"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// reply is a message of type NFT_MSG_<typ> for family at generation gen.
func reply(typ int, family uint8, gen uint32, as ...netlink.Attribute) netlink.Message {
	return netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(nfnlSubsys | typ)},
		Data:   append([]byte{family, unix.NFNETLINK_V0, byte(gen >> 8), byte(gen)}, mustAttrs(as...)...),
	}
}

func tableMsg(t *table, gen uint32) netlink.Message {
	as := []netlink.Attribute{
		{Type: unix.NFTA_TABLE_NAME, Data: cstr(t.name)},
		{Type: unix.NFTA_TABLE_FLAGS, Data: put32(t.flags)},
		{Type: 3, Data: put32(tableUse(t))},
		{Type: 4, Data: put64(t.handle)},
	}
	if t.userdata != nil {
		as = append(as, netlink.Attribute{Type: tableUserdata, Data: t.userdata})
	}
	return reply(unix.NFT_MSG_NEWTABLE, t.family, gen, as...)
}

// tableUse is NFTA_TABLE_USE: the table's chains, named sets and objects
// (the kernel does not count an anonymous set, its rule holds it).
func tableUse(t *table) uint32 {
	n := len(t.chains) + len(t.objs)
	for _, s := range t.sets {
		if s.flags&setAnonymous == 0 {
			n++
		}
	}
	return uint32(n)
}

func chainMsg(t *table, c *chain, gen uint32) netlink.Message {
	as := []netlink.Attribute{
		{Type: unix.NFTA_CHAIN_TABLE, Data: cstr(t.name)},
		{Type: unix.NFTA_CHAIN_NAME, Data: cstr(c.name)},
		{Type: unix.NFTA_CHAIN_HANDLE, Data: put64(c.handle)},
	}
	if c.base {
		hook := []netlink.Attribute{{Type: unix.NFTA_HOOK_HOOKNUM, Data: put32(c.hooknum)}, {Type: unix.NFTA_HOOK_PRIORITY, Data: put32(uint32(c.prio))}}
		if c.dev != nil {
			hook = append(hook, netlink.Attribute{Type: unix.NFTA_HOOK_DEV, Data: c.dev})
		}
		as = append(as, nest(unix.NFTA_CHAIN_HOOK, hook...),
			netlink.Attribute{Type: unix.NFTA_CHAIN_POLICY, Data: put32(c.policy)},
			netlink.Attribute{Type: unix.NFTA_CHAIN_TYPE, Data: cstr(c.typ)},
			netlink.Attribute{Type: chainFlags, Data: put32(1)}) // NFT_CHAIN_BASE
	}
	as = append(as, netlink.Attribute{Type: 6, Data: put32(uint32(len(c.rules) + t.chainUse(c.name)))}) // NFTA_CHAIN_USE
	if c.userdata != nil {
		as = append(as, netlink.Attribute{Type: chainUserdata, Data: c.userdata})
	}
	return reply(unix.NFT_MSG_NEWCHAIN, t.family, gen, as...)
}

// ruleMsg is rule i of chain c, with its position (the previous rule's
// handle), as a dump or an echo shows it.
func ruleMsg(family uint8, t *table, c *chain, i int, gen uint32) netlink.Message {
	r := c.rules[i]
	as := []netlink.Attribute{
		{Type: unix.NFTA_RULE_TABLE, Data: cstr(t.name)},
		{Type: unix.NFTA_RULE_CHAIN, Data: cstr(c.name)},
		{Type: unix.NFTA_RULE_HANDLE, Data: put64(r.handle)},
	}
	if i > 0 {
		as = append(as, netlink.Attribute{Type: unix.NFTA_RULE_POSITION, Data: put64(c.rules[i-1].handle)})
	}
	as = append(as, netlink.Attribute{Type: unix.NFTA_RULE_EXPRESSIONS | netlink.Nested, Data: r.exprs})
	if r.compat != nil {
		as = append(as, netlink.Attribute{Type: unix.NFTA_RULE_COMPAT | netlink.Nested, Data: r.compat})
	}
	if r.userdata != nil {
		as = append(as, netlink.Attribute{Type: unix.NFTA_RULE_USERDATA, Data: r.userdata})
	}
	return reply(unix.NFT_MSG_NEWRULE, family, gen, as...)
}

func setMsg(t *table, s *set, gen uint32) netlink.Message {
	as := []netlink.Attribute{
		{Type: unix.NFTA_SET_TABLE, Data: cstr(t.name)},
		{Type: unix.NFTA_SET_NAME, Data: cstr(s.name)},
		{Type: setHandle, Data: put64(s.handle)},
	}
	if s.flags != 0 {
		as = append(as, netlink.Attribute{Type: unix.NFTA_SET_FLAGS, Data: put32(s.flags)})
	}
	as = append(as, netlink.Attribute{Type: unix.NFTA_SET_KEY_TYPE, Data: put32(s.keyType)}, netlink.Attribute{Type: unix.NFTA_SET_KEY_LEN, Data: put32(s.keyLen)})
	if s.flags&setMap != 0 {
		as = append(as, netlink.Attribute{Type: unix.NFTA_SET_DATA_TYPE, Data: put32(s.dataType)}, netlink.Attribute{Type: unix.NFTA_SET_DATA_LEN, Data: put32(s.dataLen)})
	}
	if s.flags&setObject != 0 {
		as = append(as, netlink.Attribute{Type: unix.NFTA_SET_OBJ_TYPE, Data: put32(s.objType)})
	}
	if s.timeout != 0 {
		as = append(as, netlink.Attribute{Type: unix.NFTA_SET_TIMEOUT, Data: put64(s.timeout)})
	}
	if s.gcInterval != 0 {
		as = append(as, netlink.Attribute{Type: unix.NFTA_SET_GC_INTERVAL, Data: put32(s.gcInterval)})
	}
	if s.policy != nil && *s.policy != 0 {
		as = append(as, netlink.Attribute{Type: unix.NFTA_SET_POLICY, Data: put32(*s.policy)})
	}
	if s.userdata != nil {
		as = append(as, netlink.Attribute{Type: unix.NFTA_SET_USERDATA, Data: s.userdata})
	}
	as = append(as, netlink.Attribute{Type: unix.NFTA_SET_DESC | netlink.Nested, Data: s.desc})
	return reply(unix.NFT_MSG_NEWSET, t.family, gen, as...)
}

// elemAttr is one element as the kernel lists it, at now.
func (k *Kernel) elemAttr(s *set, e *elem) netlink.Attribute {
	as := []netlink.Attribute{nest(unix.NFTA_SET_ELEM_KEY, netlink.Attribute{Type: unix.NFTA_DATA_VALUE, Data: e.key})}
	if e.keyEnd != nil {
		as = append(as, nest(elemKeyEnd, netlink.Attribute{Type: unix.NFTA_DATA_VALUE, Data: e.keyEnd}))
	}
	if e.data != nil {
		as = append(as, netlink.Attribute{Type: unix.NFTA_SET_ELEM_DATA | netlink.Nested, Data: e.data})
	}
	if e.exprs != nil {
		as = append(as, netlink.Attribute{Type: unix.NFTA_SET_ELEM_EXPR | netlink.Nested, Data: e.exprs})
	}
	if e.objref != "" {
		as = append(as, netlink.Attribute{Type: unix.NFTA_SET_ELEM_OBJREF, Data: cstr(e.objref)})
	}
	if e.flags != 0 {
		as = append(as, netlink.Attribute{Type: unix.NFTA_SET_ELEM_FLAGS, Data: put32(e.flags)})
	}
	if s.flags&setTimeout != 0 {
		if e.timeout != s.timeout {
			as = append(as, netlink.Attribute{Type: unix.NFTA_SET_ELEM_TIMEOUT, Data: put64(e.timeout)})
		}
		if !e.expires.IsZero() {
			left := e.expires.Sub(k.now()).Milliseconds()
			if left < 0 {
				left = 0
			}
			as = append(as, netlink.Attribute{Type: unix.NFTA_SET_ELEM_EXPIRATION, Data: put64(uint64(left))})
		}
	}
	if e.userdata != nil {
		as = append(as, netlink.Attribute{Type: unix.NFTA_SET_ELEM_USERDATA, Data: e.userdata})
	}
	return netlink.Attribute{Type: unix.NFTA_LIST_ELEM | netlink.Nested, Data: mustAttrs(as...)}
}

// elemMsgs lists elems of s in messages of at most ~16 KiB each (an
// attribute holds at most 64 KiB).
func (k *Kernel) elemMsgs(t *table, s *set, elems []*elem, gen uint32) []netlink.Message {
	var out []netlink.Message
	for len(elems) > 0 {
		var items []netlink.Attribute
		size := 0
		for len(elems) > 0 && size < 16<<10 {
			a := k.elemAttr(s, elems[0])
			items = append(items, a)
			size += len(a.Data) + 4
			elems = elems[1:]
		}
		out = append(out, reply(unix.NFT_MSG_NEWSETELEM, t.family, gen,
			netlink.Attribute{Type: unix.NFTA_SET_ELEM_LIST_TABLE, Data: cstr(t.name)},
			netlink.Attribute{Type: unix.NFTA_SET_ELEM_LIST_SET, Data: cstr(s.name)},
			nest(unix.NFTA_SET_ELEM_LIST_ELEMENTS, items...)))
	}
	return out
}

func objMsg(t *table, o *obj, gen uint32) netlink.Message {
	data := o.data
	if o.typ == objCounter {
		data = mustAttrs(netlink.Attribute{Type: unix.NFTA_COUNTER_BYTES, Data: put64(o.bytes)}, netlink.Attribute{Type: unix.NFTA_COUNTER_PACKETS, Data: put64(o.packets)})
	}
	as := []netlink.Attribute{
		{Type: unix.NFTA_OBJ_TABLE, Data: cstr(t.name)},
		{Type: unix.NFTA_OBJ_NAME, Data: cstr(o.name)},
		{Type: unix.NFTA_OBJ_TYPE, Data: put32(o.typ)},
		{Type: 5, Data: put32(uint32(t.objUse(o.name)))}, // NFTA_OBJ_USE
		{Type: unix.NFTA_OBJ_DATA | netlink.Nested, Data: data},
		{Type: objHandle, Data: put64(o.handle)},
	}
	if o.userdata != nil {
		as = append(as, netlink.Attribute{Type: objUserdata, Data: o.userdata})
	}
	return reply(unix.NFT_MSG_NEWOBJ, t.family, gen, as...)
}

func genMsg(gen uint32) netlink.Message {
	return reply(unix.NFT_MSG_NEWGEN, unix.AF_UNSPEC, gen,
		netlink.Attribute{Type: unix.NFTA_GEN_ID, Data: put32(gen)},
		netlink.Attribute{Type: unix.NFTA_GEN_PROC_PID, Data: put32(uint32(os.Getpid()))},
		netlink.Attribute{Type: unix.NFTA_GEN_PROC_NAME, Data: cstr(procName)})
}
