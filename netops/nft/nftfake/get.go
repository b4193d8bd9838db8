package nftfake

import (
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// get answers a message outside a batch: a dump or a single get.
func (k *Kernel) get(m netlink.Message) [][]netlink.Message {
	if int(m.Header.Type)>>8 != unix.NFNL_SUBSYS_NFTABLES || len(m.Data) < 4 {
		return [][]netlink.Message{{ack(m, k.refuse(m, ""))}}
	}
	a, err := attrs(m.Data[4:])
	if err != nil {
		return [][]netlink.Message{{ack(m, errno(unix.EINVAL))}}
	}
	x := &msg{m: m, typ: int(m.Header.Type) & 0xff, family: m.Data[0], flags: m.Header.Flags, a: a}
	dump := m.Header.Flags&netlink.Dump == netlink.Dump
	var out []netlink.Message
	switch x.typ {
	case unix.NFT_MSG_GETTABLE:
		out, err = k.getTables(x, dump)
	case unix.NFT_MSG_GETCHAIN:
		out, err = k.getChains(x, dump)
	case unix.NFT_MSG_GETRULE:
		out, err = k.getRules(x, dump)
	case unix.NFT_MSG_GETSET:
		out, err = k.getSets(x, dump)
	case unix.NFT_MSG_GETSETELEM:
		if !dump {
			return k.getElems(x)
		}
		out, err = k.dumpElems(x)
	case unix.NFT_MSG_GETOBJ, unix.NFT_MSG_GETOBJ_RESET:
		out, err = k.getObjs(x, dump)
	case unix.NFT_MSG_GETGEN:
		out = []netlink.Message{genMsg(k.gen)}
	case unix.NFT_MSG_GETFLOWTABLE:
		if !dump {
			err = errno(unix.ENOENT)
		} // a dump lists none: the fake refuses to make flowtables
	case unix.NFT_MSG_NEWTABLE, unix.NFT_MSG_DELTABLE, unix.NFT_MSG_NEWCHAIN, unix.NFT_MSG_DELCHAIN,
		unix.NFT_MSG_NEWRULE, unix.NFT_MSG_DELRULE, unix.NFT_MSG_NEWSET, unix.NFT_MSG_DELSET,
		unix.NFT_MSG_NEWSETELEM, unix.NFT_MSG_DELSETELEM, unix.NFT_MSG_NEWOBJ, unix.NFT_MSG_DELOBJ,
		msgDestroyTable, msgDestroyChain, msgDestroyRule, msgDestroySet, msgDestroySetElem, msgDestroyObj:
		err = errno(unix.EINVAL) // a change outside a batch
	default:
		err = k.refuse(m, "")
	}
	if err != nil {
		return [][]netlink.Message{{ack(m, err)}}
	}
	for i := range out {
		out[i].Header.Sequence, out[i].Header.PID = m.Header.Sequence, m.Header.PID
	}
	if dump {
		for i := range out {
			out[i].Header.Flags |= netlink.Multi
		}
		done := netlink.Message{Header: netlink.Header{Type: netlink.Done, Flags: netlink.Multi, Sequence: m.Header.Sequence, PID: m.Header.PID},
			Data: make([]byte, 4)}
		return [][]netlink.Message{append(out, done)}
	}
	d := make([][]netlink.Message, 0, len(out)+1)
	for _, o := range out {
		d = append(d, []netlink.Message{o})
	}
	if m.Header.Flags&netlink.Acknowledge != 0 {
		d = append(d, []netlink.Message{ack(m, nil)})
	}
	return d
}

// tables are the tables of family (all for NFPROTO_UNSPEC).
func (k *Kernel) tables(family uint8) []*table {
	var out []*table
	for _, t := range k.w.tables {
		if family == unix.NFPROTO_UNSPEC || t.family == family {
			out = append(out, t)
		}
	}
	return out
}

func (k *Kernel) getTables(x *msg, dump bool) ([]netlink.Message, error) {
	var out []netlink.Message
	for _, t := range k.tables(x.family) {
		if dump || t.name == str(x.a[unix.NFTA_TABLE_NAME]) {
			out = append(out, tableMsg(t, k.gen))
		}
	}
	if !dump && len(out) == 0 {
		return nil, errno(unix.ENOENT)
	}
	return out, nil
}

func (k *Kernel) getChains(x *msg, dump bool) ([]netlink.Message, error) {
	var out []netlink.Message
	for _, t := range k.tables(x.family) {
		if !dump && t.name != str(x.a[unix.NFTA_CHAIN_TABLE]) {
			continue
		}
		for _, c := range t.chains {
			if dump || c.name == str(x.a[unix.NFTA_CHAIN_NAME]) {
				out = append(out, chainMsg(t, c, k.gen))
			}
		}
	}
	if !dump && len(out) == 0 {
		return nil, errno(unix.ENOENT)
	}
	return out, nil
}

func (k *Kernel) getRules(x *msg, dump bool) ([]netlink.Message, error) {
	tn, byTable := x.a[unix.NFTA_RULE_TABLE]
	cn, byChain := x.a[unix.NFTA_RULE_CHAIN]
	var out []netlink.Message
	for _, t := range k.tables(x.family) {
		if byTable && t.name != str(tn) {
			continue
		}
		for _, c := range t.chains {
			if byChain && c.name != str(cn) {
				continue
			}
			for i, r := range c.rules {
				if dump || r.handle == be64(x.a[unix.NFTA_RULE_HANDLE]) {
					out = append(out, ruleMsg(t.family, t, c, i, k.gen))
				}
			}
		}
	}
	if !dump && len(out) == 0 {
		return nil, errno(unix.ENOENT)
	}
	return out, nil
}

func (k *Kernel) getSets(x *msg, dump bool) ([]netlink.Message, error) {
	tn, byTable := x.a[unix.NFTA_SET_TABLE]
	if byTable && x.family != unix.NFPROTO_UNSPEC && k.w.table(x.family, str(tn)) == nil {
		return nil, errno(unix.ENOENT) // the kernel checks the table before dumping
	}
	var out []netlink.Message
	for _, t := range k.tables(x.family) {
		if byTable && t.name != str(tn) {
			continue
		}
		for _, s := range t.sets {
			if dump || s.name == str(x.a[unix.NFTA_SET_NAME]) {
				out = append(out, setMsg(t, s, k.gen))
			}
		}
	}
	if !dump && len(out) == 0 {
		return nil, errno(unix.ENOENT)
	}
	return out, nil
}

// elemSetOf finds the set a GETSETELEM names.
func (k *Kernel) elemSetOf(x *msg) (*table, *set, error) {
	t := k.w.table(x.family, str(x.a[unix.NFTA_SET_ELEM_LIST_TABLE]))
	if t == nil {
		return nil, nil, errno(unix.ENOENT)
	}
	s := t.set(str(x.a[unix.NFTA_SET_ELEM_LIST_SET]))
	if s == nil {
		return nil, nil, errno(unix.ENOENT)
	}
	return t, s, nil
}

func (k *Kernel) dumpElems(x *msg) ([]netlink.Message, error) {
	t, s, err := k.elemSetOf(x)
	if err != nil {
		return nil, err
	}
	return k.elemMsgs(t, s, s.elems, k.gen), nil
}

// getElems answers a single get of elements: one message per element, or
// ENOENT for the first missing.
func (k *Kernel) getElems(x *msg) [][]netlink.Message {
	fail := func(err error) [][]netlink.Message { return [][]netlink.Message{{ack(x.m, err)}} }
	t, s, err := k.elemSetOf(x)
	if err != nil {
		return fail(err)
	}
	items, err := list(x.a[unix.NFTA_SET_ELEM_LIST_ELEMENTS])
	if err != nil || len(items) == 0 {
		return fail(errno(unix.EINVAL))
	}
	var out [][]netlink.Message
	for _, it := range items {
		ea, err := attrs(it)
		if err != nil {
			return fail(errno(unix.EINVAL))
		}
		key, err := value(ea[unix.NFTA_SET_ELEM_KEY], s.keyLen)
		if err != nil {
			return fail(err)
		}
		_, e := s.elem(key, be32(ea[unix.NFTA_SET_ELEM_FLAGS]))
		if e == nil {
			return fail(errno(unix.ENOENT))
		}
		m := k.elemMsgs(t, s, []*elem{e}, k.gen)[0]
		m.Header.Sequence, m.Header.PID = x.m.Header.Sequence, x.m.Header.PID
		out = append(out, []netlink.Message{m})
	}
	if x.flags&netlink.Acknowledge != 0 {
		out = append(out, []netlink.Message{ack(x.m, nil)})
	}
	return out
}

func (k *Kernel) getObjs(x *msg, dump bool) ([]netlink.Message, error) {
	tn, byTable := x.a[unix.NFTA_OBJ_TABLE]
	typ, byType := x.a[unix.NFTA_OBJ_TYPE]
	reset := x.typ == unix.NFT_MSG_GETOBJ_RESET
	var out []netlink.Message
	for _, t := range k.tables(x.family) {
		if byTable && t.name != str(tn) {
			continue
		}
		for _, o := range t.objs {
			if byType && o.typ != be32(typ) || !dump && o.name != str(x.a[unix.NFTA_OBJ_NAME]) {
				continue
			}
			out = append(out, objMsg(t, o, k.gen))
			if reset {
				o.bytes, o.packets = 0, 0
			}
		}
	}
	if !dump && len(out) == 0 {
		return nil, errno(unix.ENOENT)
	}
	return out, nil
}
