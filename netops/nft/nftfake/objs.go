package nftfake

import (
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Named objects: counters (and any other type, kept as sent).

// Attributes golang.org/x/sys does not name (NFTA_OBJ_HANDLE, NFTA_OBJ_USERDATA), and
// NFT_OBJECT_COUNTER.
const (
	objHandle   = 6
	objUserdata = 8

	objCounter = 1
)

func (tx *txn) newObj(t *table, x *msg) error {
	name, ok1 := x.a[unix.NFTA_OBJ_NAME]
	typ, ok2 := x.a[unix.NFTA_OBJ_TYPE]
	data, ok3 := x.a[unix.NFTA_OBJ_DATA]
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
		o.bytes, o.packets = be64(ca[unix.NFTA_COUNTER_BYTES]), be64(ca[unix.NFTA_COUNTER_PACKETS])
	}
	t.hgen++
	o.handle = t.hgen
	t.objs = append(t.objs, o)
	tx.changed = true
	return nil
}

func (tx *txn) delObj(t *table, x *msg) error {
	typ := be32(x.a[unix.NFTA_OBJ_TYPE])
	return del(tx, x, &t.objs, unix.NFTA_OBJ_NAME, objHandle, func(o *obj) bool { return o.typ == typ },
		func(o *obj) bool { return t.objUse(o.name) > 0 })
}
