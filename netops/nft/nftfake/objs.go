package nftfake

import (
	"slices"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Named objects: counters (and any other type, kept as sent).

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
