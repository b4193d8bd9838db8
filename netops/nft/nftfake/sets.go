package nftfake

import (
	"bytes"
	"slices"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

const (
	setTable      = 1
	setName_      = 2
	setFlags      = 3
	setKeyType    = 4
	setKeyLen     = 5
	setDataType   = 6
	setDataLen    = 7
	setPolicy     = 8
	setDesc       = 9
	setID         = 10
	setTimeoutA   = 11
	setGCInterval = 12
	setUserdata   = 13
	setObjType    = 15
	setHandle     = 16
	setExpr       = 17
	setExprs      = 18

	nftDataVerdict = 0xffffff00 // NFT_DATA_VERDICT, a verdict map's data type
)

func (tx *txn) newSet(x *msg) error {
	t, err := tx.tableOf(x, setTable)
	if err != nil {
		return err
	}
	name, ok := x.a[setName_]
	if !ok || len(name) == 0 {
		return errno(unix.EINVAL)
	}
	kl, ok := x.a[setKeyLen]
	if !ok || be32(kl) == 0 || be32(kl) > 64 {
		return errno(unix.EINVAL)
	}
	s := &set{name: str(name), id: be32(x.a[setID]), flags: be32(x.a[setFlags]), keyType: be32(x.a[setKeyType]), keyLen: be32(kl),
		userdata: x.a[setUserdata], desc: x.a[setDesc], timeout: be64(x.a[setTimeoutA]), gcInterval: be32(x.a[setGCInterval])}
	if dt, ok := x.a[setDataType]; ok {
		s.hasData, s.dataType, s.dataLen = true, be32(dt), be32(x.a[setDataLen])
	}
	if ot, ok := x.a[setObjType]; ok {
		s.hasObjType, s.objType = true, be32(ot)
	}
	if p, ok := x.a[setPolicy]; ok {
		v := be32(p)
		s.policy = &v
	}
	for _, a := range []uint16{setExpr, setExprs} {
		if e, ok := x.a[a]; ok {
			s.exprs = append(s.exprs, e)
		}
	}
	switch {
	case s.flags&setMap != 0 && !s.hasData,
		s.flags&setMap == 0 && s.hasData,
		s.flags&setObject != 0 && !s.hasObjType,
		s.flags&setMap != 0 && s.dataType != nftDataVerdict && (s.dataLen == 0 || s.dataLen > 64),
		(s.timeout != 0 || s.gcInterval != 0) && s.flags&setTimeout == 0:
		return errno(unix.EINVAL)
	}
	if old := t.set(s.name); old != nil {
		switch {
		case x.excl():
			return errno(unix.EEXIST)
		case x.flags&netlink.Replace != 0:
			return errno(unix.EOPNOTSUPP)
		case old.flags != s.flags || old.keyType != s.keyType || old.keyLen != s.keyLen ||
			old.dataType != s.dataType || old.dataLen != s.dataLen || old.objType != s.objType:
			return errno(unix.EEXIST)
		}
		return nil
	}
	if x.flags&netlink.Create == 0 { // without NLM_F_CREATE a NEWSET only asserts the set
		return errno(unix.ENOENT)
	}
	s.name = setName(t, s.name)
	t.hgen++
	s.handle = t.hgen
	t.sets = append(t.sets, s)
	if s.id != 0 {
		tx.setIDs[s.id] = s
	}
	tx.changed = true
	return nil
}

func (tx *txn) delSet(x *msg) error {
	t, err := tx.tableOf(x, setTable)
	if err != nil {
		return err
	}
	i := -1
	if name, ok := x.a[setName_]; ok {
		i = slices.IndexFunc(t.sets, func(s *set) bool { return s.name == str(name) })
	} else if h, ok := x.a[setHandle]; ok {
		i = slices.IndexFunc(t.sets, func(s *set) bool { return s.handle == be64(h) })
	} else {
		return errno(unix.EINVAL)
	}
	if i < 0 {
		if x.destroy() {
			return nil
		}
		return errno(unix.ENOENT)
	}
	if t.setUse(t.sets[i].name) > 0 {
		return errno(unix.EBUSY)
	}
	t.sets = slices.Delete(t.sets, i, i+1)
	tx.changed = true
	return nil
}

const (
	listTable    = 1
	listSet      = 2
	listElements = 3
	listSetID    = 4

	elemKey        = 1
	elemData       = 2
	elemFlags      = 3
	elemTimeout    = 4
	elemExpiration = 5
	elemUserdata   = 6
	elemExpr       = 7
	elemObjref     = 9
	elemKeyEnd     = 10
	elemExprs      = 11
)

// elemSet finds the set a NEWSETELEM/DELSETELEM names (by name or by the
// ID of a set of this batch).
func (tx *txn) elemSet(x *msg) (*table, *set, error) {
	t, err := tx.tableOf(x, listTable)
	if err != nil {
		return nil, nil, err
	}
	var s *set
	if n, ok := x.a[listSet]; ok {
		s = t.set(str(n))
	}
	if id, ok := x.a[listSetID]; ok && s == nil {
		s = tx.setIDs[be32(id)]
	}
	if s == nil {
		return t, nil, errno(unix.ENOENT)
	}
	return t, s, nil
}

// bound reports whether s is a constant or anonymous set a rule uses
// (which no element change may touch).
func bound(t *table, s *set) bool {
	return s.flags&(setConstant|setAnonymous) != 0 && t.setUse(s.name) > 0
}

// value decodes a key or value (NFTA_DATA_VALUE) of length n.
func value(b []byte, n uint32) ([]byte, error) {
	da, err := attrs(b)
	if err != nil {
		return nil, errno(unix.EINVAL)
	}
	v, ok := da[dataValue]
	if !ok || uint32(len(v)) != n {
		return nil, errno(unix.EINVAL)
	}
	return v, nil
}

func (tx *txn) newElems(x *msg) error {
	t, s, err := tx.elemSet(x)
	if err != nil {
		return err
	}
	if bound(t, s) {
		return errno(unix.EBUSY)
	}
	items, err := list(x.a[listElements])
	if err != nil {
		return errno(unix.EINVAL)
	}
	for _, it := range items {
		if err := tx.newElem(t, s, x, it); err != nil {
			return err
		}
	}
	s.sortElems()
	return nil
}

func (tx *txn) newElem(t *table, s *set, x *msg, it []byte) error {
	ea, err := attrs(it)
	if err != nil {
		return errno(unix.EINVAL)
	}
	e := &elem{flags: be32(ea[elemFlags]), userdata: ea[elemUserdata], exprs: ea[elemExpr]}
	if e.flags&^(elemIntervalEnd|elemCatchall) != 0 ||
		e.flags&elemIntervalEnd != 0 && s.flags&setInterval == 0 {
		return errno(unix.EINVAL)
	}
	if e.flags&elemCatchall != 0 {
		return tx.k.refuse(x.m, " of a catch-all element")
	}
	if e.key, err = value(ea[elemKey], s.keyLen); err != nil {
		return err
	}
	if ke, ok := ea[elemKeyEnd]; ok {
		if e.keyEnd, err = value(ke, s.keyLen); err != nil {
			return err
		}
	}
	d, hasData := ea[elemData]
	switch {
	case s.flags&setMap != 0 && e.flags&elemIntervalEnd == 0 && !hasData,
		s.flags&setMap == 0 && hasData:
		return errno(unix.EINVAL)
	case hasData && s.dataType == nftDataVerdict:
		if err := tx.verdict(t, nil, d); err != nil {
			return err
		}
		e.data, e.jump = d, jumpOf(d)
	case hasData:
		if _, err := value(d, s.dataLen); err != nil {
			return err
		}
		e.data = d
	}
	if o, ok := ea[elemObjref]; ok {
		if s.flags&setObject == 0 || t.obj(str(o), s.objType) == nil {
			return errno(unix.ENOENT)
		}
		e.objref = str(o)
	}
	to, hasTimeout := ea[elemTimeout]
	if (hasTimeout || ea[elemExpiration] != nil) && s.flags&setTimeout == 0 {
		return errno(unix.EINVAL)
	}
	e.timeout = s.timeout
	if hasTimeout {
		e.timeout = be64(to)
	}
	if e.timeout > 0 {
		e.expires = tx.now.Add(time.Duration(e.timeout) * time.Millisecond)
	}
	if _, old := s.elem(e.key, e.flags); old != nil {
		if !bytes.Equal(old.data, e.data) || old.objref != e.objref || x.excl() {
			return errno(unix.EEXIST)
		}
		if hasTimeout { // the kernel updates an element's timeout
			old.timeout, old.expires = e.timeout, e.expires
			tx.changed = true
		}
		return nil
	}
	s.elems = append(s.elems, e)
	tx.changed = true
	return nil
}

func (tx *txn) delElems(x *msg) error {
	t, s, err := tx.elemSet(x)
	if err != nil {
		return err
	}
	if bound(t, s) {
		return errno(unix.EBUSY)
	}
	b, ok := x.a[listElements]
	if !ok { // flush
		if len(s.elems) > 0 {
			s.elems, tx.changed = nil, true
		}
		return nil
	}
	items, err := list(b)
	if err != nil {
		return errno(unix.EINVAL)
	}
	for _, it := range items {
		ea, err := attrs(it)
		if err != nil {
			return errno(unix.EINVAL)
		}
		key, err := value(ea[elemKey], s.keyLen)
		if err != nil {
			return err
		}
		i, _ := s.elem(key, be32(ea[elemFlags]))
		if i < 0 {
			if x.destroy() {
				continue
			}
			return errno(unix.ENOENT)
		}
		s.elems = slices.Delete(s.elems, i, i+1)
		tx.changed = true
	}
	return nil
}
