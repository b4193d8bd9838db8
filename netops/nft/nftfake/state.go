package nftfake

import (
	"bytes"
	"encoding/binary"
	"slices"
	"time"

	"github.com/mdlayher/netlink"
)

// world is every table of the namespace.
type world struct {
	tables []*table
	tableH uint64 // the last table handle given
	// expiring says that some element may have a timeout: expire walks
	// the elements only then (it runs before every request).
	expiring bool
}

type table struct {
	family   uint8
	name     string
	flags    uint32
	handle   uint64
	hgen     uint64 // the last handle given in the table (chains, rules, sets, objects)
	userdata []byte
	chains   []*chain
	sets     []*set
	objs     []*obj
}

type chain struct {
	name     string
	handle   uint64
	base     bool
	hooknum  uint32
	prio     int32
	policy   uint32
	typ      string
	dev      []byte // the hook's raw NFTA_HOOK_DEV, if any
	userdata []byte
	rules    []*rule
}

type rule struct {
	handle   uint64
	exprs    []byte // NFTA_RULE_EXPRESSIONS' payload, set IDs resolved to names
	userdata []byte
	compat   []byte // NFTA_RULE_COMPAT's payload, if any
	jumps    []string
	sets     []string
	objs     []string
}

type set struct {
	name       string
	handle     uint64
	id         uint32 // NFTA_SET_ID, for the batch that makes it
	flags      uint32
	keyType    uint32
	keyLen     uint32
	dataType   uint32
	dataLen    uint32
	hasData    bool // DATA_TYPE was given
	objType    uint32
	hasObjType bool
	policy     *uint32
	timeout    uint64 // ms
	gcInterval uint32
	userdata   []byte
	desc       []byte // NFTA_SET_DESC's payload
	exprs      [][]byte
	elems      []*elem
}

type elem struct {
	key      []byte
	keyEnd   []byte
	data     []byte // NFTA_SET_ELEM_DATA's payload (a value or a verdict)
	jump     string // the chain a verdict element jumps to or goes to
	flags    uint32
	timeout  uint64    // ms; 0: none
	expires  time.Time // zero: never
	userdata []byte
	objref   string
	exprs    []byte
}

type obj struct {
	name     string
	typ      uint32
	handle   uint64
	data     []byte // NFTA_OBJ_DATA's payload as sent (not counters)
	bytes    uint64 // a counter's
	packets  uint64
	userdata []byte
}

func (w *world) clone() *world {
	c := &world{tableH: w.tableH, expiring: w.expiring, tables: make([]*table, len(w.tables))}
	for i, t := range w.tables {
		c.tables[i] = t.clone()
	}
	return c
}

func (t *table) clone() *table {
	c := *t
	c.chains = make([]*chain, len(t.chains))
	for i, ch := range t.chains {
		cc := *ch
		cc.rules = slices.Clone(ch.rules) // rules are never changed in place
		c.chains[i] = &cc
	}
	c.sets = make([]*set, len(t.sets))
	for i, s := range t.sets {
		cs := *s
		cs.elems = make([]*elem, len(s.elems))
		for j, e := range s.elems {
			ce := *e
			cs.elems[j] = &ce
		}
		c.sets[i] = &cs
	}
	c.objs = make([]*obj, len(t.objs))
	for i, o := range t.objs {
		co := *o
		c.objs[i] = &co
	}
	return &c
}

// expire drops the elements whose timeout has passed at now.
func (w *world) expire(now time.Time) {
	if !w.expiring {
		return
	}
	left := false
	for _, t := range w.tables {
		for _, s := range t.sets {
			s.elems = slices.DeleteFunc(s.elems, func(e *elem) bool {
				if e.expires.IsZero() {
					return false
				}
				gone := !now.Before(e.expires)
				left = left || !gone
				return gone
			})
		}
	}
	w.expiring = left
}

func (w *world) table(family uint8, name string) *table {
	for _, t := range w.tables {
		if t.family == family && t.name == name {
			return t
		}
	}
	return nil
}

func (t *table) chain(name string) *chain {
	for _, c := range t.chains {
		if c.name == name {
			return c
		}
	}
	return nil
}

func (t *table) set(name string) *set {
	for _, s := range t.sets {
		if s.name == name {
			return s
		}
	}
	return nil
}

func (t *table) obj(name string, typ uint32) *obj {
	for _, o := range t.objs {
		if o.name == name && (typ == 0 || o.typ == typ) {
			return o
		}
	}
	return nil
}

// use is how many references the chain named name has in t: jumps of
// rules (of other chains) and of verdict map elements.
func (t *table) chainUse(name string) int {
	n := 0
	for _, c := range t.chains {
		for _, r := range c.rules {
			for _, j := range r.jumps {
				if j == name {
					n++
				}
			}
		}
	}
	for _, s := range t.sets {
		for _, e := range s.elems {
			if e.jump == name {
				n++
			}
		}
	}
	return n
}

// setUse is how many rules use the set named name.
func (t *table) setUse(name string) int {
	n := 0
	for _, c := range t.chains {
		for _, r := range c.rules {
			n += count(r.sets, name)
		}
	}
	return n
}

// objUse is how many rules and map elements refer to the object named
// name.
func (t *table) objUse(name string) int {
	n := 0
	for _, c := range t.chains {
		for _, r := range c.rules {
			n += count(r.objs, name)
		}
	}
	for _, s := range t.sets {
		for _, e := range s.elems {
			if e.objref == name {
				n++
			}
		}
	}
	return n
}

func count(l []string, s string) int {
	n := 0
	for _, x := range l {
		if x == s {
			n++
		}
	}
	return n
}

// unbindAnon drops the anonymous sets no rule uses any more (their rule
// was deleted).
func (w *world) unbindAnon() {
	for _, t := range w.tables {
		t.sets = slices.DeleteFunc(t.sets, func(s *set) bool {
			return s.flags&setAnonymous != 0 && t.setUse(s.name) == 0
		})
	}
}

// elem finds the element of s with key (and the interval end flag of
// flags).
func (s *set) elem(key []byte, flags uint32) (int, *elem) {
	for i, e := range s.elems {
		if bytes.Equal(e.key, key) && e.flags&elemIntervalEnd == flags&elemIntervalEnd {
			return i, e
		}
	}
	return -1, nil
}

// sortElems keeps s's elements in key order (a dump's order is the
// kernel's business; the fake's is stable).
func (s *set) sortElems() {
	slices.SortStableFunc(s.elems, func(a, b *elem) int {
		if c := bytes.Compare(a.key, b.key); c != 0 {
			return c
		}
		return int(a.flags&elemIntervalEnd) - int(b.flags&elemIntervalEnd)
	})
}

// Set flags and element flags.
const (
	setAnonymous = 0x1
	setConstant  = 0x2
	setInterval  = 0x4
	setMap       = 0x8
	setTimeout   = 0x10
	setObject    = 0x40

	elemIntervalEnd = 0x1
	elemCatchall    = 0x2
)

// attrs decodes one level of attributes by type (the nested and byte
// order flags masked off).
func attrs(b []byte) (map[uint16][]byte, error) {
	as, err := netlink.UnmarshalAttributes(b)
	if err != nil {
		return nil, err
	}
	m := make(map[uint16][]byte, len(as))
	for _, a := range as {
		m[a.Type&0x3fff] = a.Data
	}
	return m, nil
}

// list decodes a list of nested attributes, in order.
func list(b []byte) ([][]byte, error) {
	as, err := netlink.UnmarshalAttributes(b)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(as))
	for i, a := range as {
		out[i] = a.Data
	}
	return out, nil
}

func str(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

func cstr(s string) []byte { return append([]byte(s), 0) }

func be32(b []byte) uint32 {
	if len(b) < 4 {
		return 0
	}
	return binary.BigEndian.Uint32(b)
}

func be64(b []byte) uint64 {
	if len(b) < 8 {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

func put32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
func put64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func mustAttrs(as ...netlink.Attribute) []byte {
	b, err := netlink.MarshalAttributes(as)
	if err != nil {
		panic(err) // only from attributes over 64 KiB, which nothing here builds
	}
	return b
}

// nest is a nested attribute.
func nest(typ uint16, as ...netlink.Attribute) netlink.Attribute {
	return netlink.Attribute{Type: typ | netlink.Nested, Data: mustAttrs(as...)}
}

// key is what a DEL finds an object by (del).
func (t *table) key() (name string, handle uint64) { return t.name, t.handle }
func (c *chain) key() (name string, handle uint64) { return c.name, c.handle }
func (s *set) key() (name string, handle uint64)   { return s.name, s.handle }
func (o *obj) key() (name string, handle uint64)   { return o.name, o.handle }
