package nftfake

import (
	"bytes"
	"slices"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Attributes golang.org/x/sys does not name (NFTA_SET_HANDLE, NFTA_SET_EXPR,
// NFTA_SET_EXPRESSIONS).
const (
	setHandle = 16
	setExpr   = 17
	setExprs  = 18

	nftDataVerdict = 0xffffff00 // NFT_DATA_VERDICT, a verdict map's data type
)

func (tx *txn) newSet(t *table, x *msg) error {
	name, ok := x.a[unix.NFTA_SET_NAME]
	if !ok || len(name) == 0 {
		return errno(unix.EINVAL)
	}
	kl, ok := x.a[unix.NFTA_SET_KEY_LEN]
	if !ok || be32(kl) == 0 || be32(kl) > 64 {
		return errno(unix.EINVAL)
	}
	s := &set{name: str(name), id: be32(x.a[unix.NFTA_SET_ID]), flags: be32(x.a[unix.NFTA_SET_FLAGS]), keyType: be32(x.a[unix.NFTA_SET_KEY_TYPE]), keyLen: be32(kl),
		userdata: x.a[unix.NFTA_SET_USERDATA], desc: x.a[unix.NFTA_SET_DESC], timeout: be64(x.a[unix.NFTA_SET_TIMEOUT]), gcInterval: be32(x.a[unix.NFTA_SET_GC_INTERVAL])}
	if dt, ok := x.a[unix.NFTA_SET_DATA_TYPE]; ok {
		s.hasData, s.dataType, s.dataLen = true, be32(dt), be32(x.a[unix.NFTA_SET_DATA_LEN])
	}
	if ot, ok := x.a[unix.NFTA_SET_OBJ_TYPE]; ok {
		s.hasObjType, s.objType = true, be32(ot)
	}
	if p, ok := x.a[unix.NFTA_SET_POLICY]; ok {
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

func (tx *txn) delSet(t *table, x *msg) error {
	return del(tx, x, &t.sets, unix.NFTA_SET_NAME, setHandle, nil, func(s *set) bool { return t.setUse(s.name) > 0 })
}

// Attributes golang.org/x/sys does not name (NFTA_SET_ELEM_KEY_END,
// NFTA_SET_ELEM_EXPRESSIONS).
const (
	elemKeyEnd = 10
	elemExprs  = 11
)

// elemSet finds the set a NEWSETELEM/DELSETELEM names (by name or by the
// ID of a set of this batch).
func (tx *txn) elemSet(t *table, x *msg) (*set, error) {
	var s *set
	if n, ok := x.a[unix.NFTA_SET_ELEM_LIST_SET]; ok {
		s = t.set(str(n))
	}
	if id, ok := x.a[unix.NFTA_SET_ELEM_LIST_SET_ID]; ok && s == nil {
		s = tx.setIDs[be32(id)]
	}
	if s == nil {
		return nil, errno(unix.ENOENT)
	}
	return s, nil
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
	v, ok := da[unix.NFTA_DATA_VALUE]
	if !ok || uint32(len(v)) != n {
		return nil, errno(unix.EINVAL)
	}
	return v, nil
}

func (tx *txn) newElems(t *table, x *msg) error {
	s, err := tx.elemSet(t, x)
	if err != nil {
		return err
	}
	if bound(t, s) {
		return errno(unix.EBUSY)
	}
	items, err := list(x.a[unix.NFTA_SET_ELEM_LIST_ELEMENTS])
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
	e := &elem{flags: be32(ea[unix.NFTA_SET_ELEM_FLAGS]), userdata: ea[unix.NFTA_SET_ELEM_USERDATA], exprs: ea[unix.NFTA_SET_ELEM_EXPR]}
	if e.flags&^(elemIntervalEnd|elemCatchall) != 0 ||
		e.flags&elemIntervalEnd != 0 && s.flags&setInterval == 0 {
		return errno(unix.EINVAL)
	}
	if e.flags&elemCatchall != 0 {
		return tx.k.refuse(x.m, " of a catch-all element")
	}
	if e.key, err = value(ea[unix.NFTA_SET_ELEM_KEY], s.keyLen); err != nil {
		return err
	}
	if ke, ok := ea[elemKeyEnd]; ok {
		if e.keyEnd, err = value(ke, s.keyLen); err != nil {
			return err
		}
	}
	d, hasData := ea[unix.NFTA_SET_ELEM_DATA]
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
	if o, ok := ea[unix.NFTA_SET_ELEM_OBJREF]; ok {
		if s.flags&setObject == 0 || t.obj(str(o), s.objType) == nil {
			return errno(unix.ENOENT)
		}
		e.objref = str(o)
	}
	to, hasTimeout := ea[unix.NFTA_SET_ELEM_TIMEOUT]
	if (hasTimeout || ea[unix.NFTA_SET_ELEM_EXPIRATION] != nil) && s.flags&setTimeout == 0 {
		return errno(unix.EINVAL)
	}
	e.timeout = s.timeout
	if hasTimeout {
		e.timeout = be64(to)
	}
	if e.timeout > 0 {
		e.expires = tx.now.Add(time.Duration(e.timeout) * time.Millisecond)
		tx.w.expiring = true
	}
	if _, old := s.elem(e.key, e.flags); old != nil {
		if !bytes.Equal(old.data, e.data) || old.objref != e.objref || x.excl() {
			return errno(unix.EEXIST)
		}
		if hasTimeout && !tx.k.before610 { // 6.10 on updates an element's timeout
			old.timeout, old.expires = e.timeout, e.expires
			tx.changed = true
		}
		return nil
	}
	s.elems = append(s.elems, e)
	tx.changed = true
	return nil
}

func (tx *txn) delElems(t *table, x *msg) error {
	s, err := tx.elemSet(t, x)
	if err != nil {
		return err
	}
	if bound(t, s) {
		return errno(unix.EBUSY)
	}
	b, ok := x.a[unix.NFTA_SET_ELEM_LIST_ELEMENTS]
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
		key, err := value(ea[unix.NFTA_SET_ELEM_KEY], s.keyLen)
		if err != nil {
			return err
		}
		i, _ := s.elem(key, be32(ea[unix.NFTA_SET_ELEM_FLAGS]))
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
