package nft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/userdata"
	mdnetlink "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Raw nftables set element messages, shared by the masquerade maps (table
// inet cnibox) and the port mapping maps (table inet cnibox-portmap): the
// google/nftables package can neither update an element's timeout nor get
// single elements.

// nftJump is NFT_JUMP (-3) as the kernel reads it: a big-endian uint32.
const nftJump = 0xfffffffd

// nftElem is one element of a set or map.
type nftElem struct {
	key     []byte
	data    []byte // a map element's value (NFTA_DATA_VALUE)
	jump    string // the chain a verdict map element jumps to
	comment string
	// timeoutMS, when sending, gives the element a timeout (0: none).
	timeoutMS uint64
	// expiring, when parsed, says that the element has a timeout or an
	// expiration (the kernel gives one to every element of a set with the
	// timeout flag); expiresMS is the time left (NFTA_SET_ELEM_EXPIRATION).
	expiring  bool
	expiresMS uint64
	// intervalEnd, when parsed, says that the element ends an interval
	// (NFT_SET_ELEM_INTERVAL_END in NFTA_SET_ELEM_FLAGS).
	intervalEnd bool
}

// nftElemMsg builds a message of type msgType (NFT_MSG_*SETELEM) for elems
// of set in the inet table table: keys only unless withData (then with
// data, jump, comment and timeout).
func nftElemMsg(table, set string, msgType int, flags mdnetlink.HeaderFlags, elems []nftElem, withData bool) mdnetlink.Message {
	list := make([]mdnetlink.Attribute, 0, len(elems))
	for i, e := range elems {
		item := []mdnetlink.Attribute{nested(unix.NFTA_SET_ELEM_KEY, attrs(mdnetlink.Attribute{Type: unix.NFTA_DATA_VALUE, Data: e.key}))}
		if withData {
			switch {
			case e.data != nil:
				item = append(item, nested(unix.NFTA_SET_ELEM_DATA, attrs(mdnetlink.Attribute{Type: unix.NFTA_DATA_VALUE, Data: e.data})))
			case e.jump != "":
				item = append(item, nested(unix.NFTA_SET_ELEM_DATA, attrs(nested(unix.NFTA_DATA_VERDICT, attrs(
					mdnetlink.Attribute{Type: unix.NFTA_VERDICT_CODE, Data: binaryutil.BigEndian.PutUint32(nftJump)},
					mdnetlink.Attribute{Type: unix.NFTA_VERDICT_CHAIN, Data: cstr(e.jump)},
				)))))
			}
			if e.timeoutMS > 0 {
				item = append(item, mdnetlink.Attribute{Type: unix.NFTA_SET_ELEM_TIMEOUT, Data: binaryutil.BigEndian.PutUint64(e.timeoutMS)})
			}
			if e.comment != "" {
				item = append(item, mdnetlink.Attribute{Type: unix.NFTA_SET_ELEM_USERDATA,
					Data: userdata.AppendString(nil, userdata.NFTNL_UDATA_SET_ELEM_COMMENT, e.comment)})
			}
		}
		list = append(list, nested(uint16(i+1), attrs(item...)))
	}
	return pmMsg(msgType, flags, attrs(
		mdnetlink.Attribute{Type: unix.NFTA_SET_ELEM_LIST_TABLE, Data: cstr(table)},
		mdnetlink.Attribute{Type: unix.NFTA_SET_ELEM_LIST_SET, Data: cstr(set)},
		nested(unix.NFTA_SET_ELEM_LIST_ELEMENTS, attrs(list...)),
	))
}

// parseNftElems decodes a NEWSETELEM message (after its nfgenmsg header):
// the set's name and its elements.
func parseNftElems(b []byte) (set string, elems []nftElem, err error) {
	if len(b) < 4 {
		return "", nil, nil
	}
	ad, err := mdnetlink.NewAttributeDecoder(b[4:])
	if err != nil {
		return "", nil, fmt.Errorf("decode set elements: %w", err)
	}
	ad.ByteOrder = binary.BigEndian
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_SET_ELEM_LIST_SET:
			set = ad.String()
		case unix.NFTA_SET_ELEM_LIST_ELEMENTS:
			ad.Nested(func(ld *mdnetlink.AttributeDecoder) error {
				for ld.Next() {
					var e nftElem
					ld.Nested(e.decode)
					elems = append(elems, e)
				}
				return nil
			})
		}
	}
	if err := ad.Err(); err != nil {
		return "", nil, fmt.Errorf("decode set elements: %w", err)
	}
	return set, elems, nil
}

// decode fills e from the attributes of one element of a set element list.
func (e *nftElem) decode(ed *mdnetlink.AttributeDecoder) error {
	for ed.Next() {
		switch ed.Type() {
		case unix.NFTA_SET_ELEM_KEY:
			ed.Nested(func(d *mdnetlink.AttributeDecoder) error {
				e.key, _ = decodeNftData(d)
				return nil
			})
		case unix.NFTA_SET_ELEM_DATA:
			ed.Nested(func(d *mdnetlink.AttributeDecoder) error {
				e.data, e.jump = decodeNftData(d)
				return nil
			})
		case unix.NFTA_SET_ELEM_TIMEOUT:
			e.expiring = true
		case unix.NFTA_SET_ELEM_EXPIRATION:
			e.expiring, e.expiresMS = true, ed.Uint64()
		case unix.NFTA_SET_ELEM_USERDATA:
			e.comment, _ = userdata.GetString(ed.Bytes(), userdata.NFTNL_UDATA_SET_ELEM_COMMENT)
		case unix.NFTA_SET_ELEM_FLAGS:
			e.intervalEnd = ed.Uint32()&unix.NFT_SET_ELEM_INTERVAL_END != 0
		}
	}
	return nil
}

// decodeNftData decodes the attributes of a set element's key or data: a
// value, or the chain of a jump verdict.
func decodeNftData(d *mdnetlink.AttributeDecoder) (value []byte, jump string) {
	for d.Next() {
		switch d.Type() {
		case unix.NFTA_DATA_VALUE:
			value = d.Bytes()
		case unix.NFTA_DATA_VERDICT:
			d.Nested(func(v *mdnetlink.AttributeDecoder) error {
				for v.Next() {
					if v.Type() == unix.NFTA_VERDICT_CHAIN {
						jump = v.String()
					}
				}
				return nil
			})
		}
	}
	return value, jump
}

// getElem gets the element with key from set of the inet table table
// (single-element get).
func (h *Handle) getElem(table, set string, key []byte) ([]mdnetlink.Message, error) {
	return h.getFamilyElem(nftables.TableFamilyINet, table, set, key)
}

// getFamilyElem gets the element with key from set of table of family.
func (h *Handle) getFamilyElem(family nftables.TableFamily, table, set string, key []byte) ([]mdnetlink.Message, error) {
	return h.nfRaw.Execute(familyElemMsg(family, table, set, unix.NFT_MSG_GETSETELEM, 0, []nftElem{{key: key}}, false))
}

// familyElemMsg is nftElemMsg for a table of family.
func familyElemMsg(family nftables.TableFamily, table, set string, msgType int, flags mdnetlink.HeaderFlags, elems []nftElem, withData bool) mdnetlink.Message {
	m := nftElemMsg(table, set, msgType, flags, elems, withData)
	m.Data[0] = byte(family) // nftElemMsg's nfgenmsg is for inet
	return m
}

// setKeys are keys of one set.
type setKeys struct {
	set  string
	keys [][]byte
}

// expireElems gives those of the keys that exist a 1 ms timeout, in one
// batch, each with its own data (a map's element is sent whole), and has
// Close wait until they have expired (waitExpired). done is false, and
// nothing changed, when an element has no timeout (a set without the
// timeout flag: a table made before it, and *noExpiry is then set, for the
// table's elements to be deleted from now on), or the kernel refused the
// update (it cannot update a timeout: *noExpiry too; or the elements
// changed meanwhile): the caller deletes then.
func (h *Handle) expireElems(family nftables.TableFamily, table string, noExpiry *bool, groups ...setKeys) (present int, done bool, err error) {
	var msgs []mdnetlink.Message
	var probe *expiringElem
	for _, g := range groups {
		var have []nftElem
		for _, k := range g.keys {
			got, err := h.getFamilyElem(family, table, g.set, k)
			if errors.Is(err, unix.ENOENT) {
				continue // no element, set or table: nothing to remove
			}
			if err != nil {
				return present, false, err
			}
			for _, m := range got {
				_, es, err := parseNftElems(m.Data)
				if err != nil {
					return present, false, err
				}
				for _, e := range es {
					if e.key == nil {
						continue
					}
					if !e.expiring {
						*noExpiry = true
						return present, false, nil
					}
					e.timeoutMS = 1
					have = append(have, e)
					present++
				}
			}
		}
		if len(have) == 0 {
			continue
		}
		if probe == nil {
			probe = &expiringElem{family: family, table: table, set: g.set, key: have[0].key}
		}
		msgs = append(msgs, familyElemMsg(family, table, g.set, unix.NFT_MSG_NEWSETELEM, mdnetlink.Acknowledge|mdnetlink.Create, have, true))
	}
	if len(msgs) == 0 {
		return 0, true, nil
	}
	if err := h.commitRaw(msgs...); err != nil {
		switch {
		case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP):
			*noExpiry = true
			return present, false, nil
		case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EBUSY):
			return present, false, nil // changed meanwhile: delete what is there
		}
		return present, false, err
	}
	h.expiring = append(h.expiring, *probe)
	return present, true, nil
}

// delPresentElems deletes those of the keys that exist in their sets of
// table (of family): delPresent.
func (h *Handle) delPresentElems(family nftables.TableFamily, table string, groups ...setKeys) (present int, err error) {
	refs := make([]elemKeys, len(groups))
	for i, g := range groups {
		refs[i] = elemKeys{family: family, table: table, set: g.set, keys: g.keys}
	}
	n, err := h.delPresent(refs)
	for _, c := range n {
		present += c
	}
	return present, err
}

// elemKeys are keys of one set of a table of a family.
type elemKeys struct {
	family     nftables.TableFamily
	table, set string
	keys       [][]byte
}

// delPresent deletes those of the keys of refs that exist, found with a
// get each, in one batch of NFT_MSG_DELSETELEM (any tables and families),
// which every kernel has (DESTROYSETELEM, which skips missing elements,
// came in Linux 6.3), and says how many of each ref's keys existed. A
// missing set or table is nothing to delete. An element deleted by
// someone else between the gets and the batch makes the kernel refuse the
// whole batch with ENOENT: the keys are read again, a few times. One batch,
// not one per table: the kernel's cleanup after each batch that deletes
// waits for an RCU grace period, and a DEL's veth delete hides one such
// wait but not two (perf-notes).
func (h *Handle) delPresent(refs []elemKeys) (present []int, err error) {
	for try := 0; ; try++ {
		present = make([]int, len(refs))
		var msgs []mdnetlink.Message
		for i, r := range refs {
			var elems []nftElem
			for _, k := range r.keys {
				_, err := h.getFamilyElem(r.family, r.table, r.set, k)
				switch {
				case err == nil:
					elems = append(elems, nftElem{key: k})
				case !errors.Is(err, unix.ENOENT):
					return present, err
				}
			}
			if len(elems) > 0 {
				present[i] = len(elems)
				msgs = append(msgs, familyElemMsg(r.family, r.table, r.set, unix.NFT_MSG_DELSETELEM, mdnetlink.Acknowledge, elems, false))
			}
		}
		if len(msgs) == 0 {
			return present, nil
		}
		err := h.commitRaw(msgs...)
		if err == nil || !errors.Is(err, unix.ENOENT) || try == 2 {
			return present, err
		}
	}
}

// waitElemGone returns once the element e, given a 1 ms timeout in a
// removal, has expired: the kernel counts in ticks (up to 4 ms at
// HZ=250), and nothing should see a removed element after the call, as
// after a delete. It polls with single-element gets (~0.02 ms each); after
// 50 ms it gives up (the element expires anyway).
func (h *Handle) waitElemGone(e expiringElem) {
	family := e.family
	if family == nftables.TableFamilyUnspecified {
		family = nftables.TableFamilyINet
	}
	deadline := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(deadline) {
		if _, err := h.getFamilyElem(family, e.table, e.set, e.key); err != nil {
			return // ENOENT: expired (or gone)
		}
		time.Sleep(250 * time.Microsecond)
	}
}

// dumpElems lists every element of set in the inet table table; a missing
// set or table lists nothing.
func (h *Handle) dumpElems(table, set string) ([]nftElem, error) {
	return h.dumpFamilyElems(nftables.TableFamilyINet, table, set)
}

// dumpFamilyElems lists every element of set in table of family; a
// missing set or table lists nothing.
func (h *Handle) dumpFamilyElems(family nftables.TableFamily, table, set string) ([]nftElem, error) {
	m := pmMsg(unix.NFT_MSG_GETSETELEM, mdnetlink.Dump, attrs(
		mdnetlink.Attribute{Type: unix.NFTA_SET_ELEM_LIST_TABLE, Data: cstr(table)},
		mdnetlink.Attribute{Type: unix.NFTA_SET_ELEM_LIST_SET, Data: cstr(set)},
	))
	m.Data[0] = byte(family)
	out, err := consistently(h, func() ([]nftElem, error) {
		msgs, err := h.dump(m)
		if err != nil {
			return nil, err
		}
		var out []nftElem
		seen := newKeysSeen(len(msgs) * 8)
		for _, m := range msgs {
			_, es, err := parseNftElems(m.Data)
			if err != nil {
				return nil, err
			}
			for _, e := range es {
				// A repeat is a walk reordered by a resize (dump.go):
				// a set holds one element per key.
				if seen.repeat(e.key, e.intervalEnd) {
					return nil, errDumpInterrupted
				}
			}
			out = append(out, es...)
		}
		return out, nil
	})
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list elements of %s: %w", set, err)
	}
	return out, nil
}

// setElem is an element of a named set.
type setElem struct {
	set  string
	elem nftElem
}

// elemMsgs builds one message of type msgType per set of table for elems
// (adds also with NLM_F_CREATE), with the data, comment and timeout when
// withData, else keys only.
func elemMsgs(table string, msgType int, flags mdnetlink.HeaderFlags, elems []setElem, withData bool) []mdnetlink.Message {
	var order []string
	bySet := map[string][]nftElem{}
	for _, e := range elems {
		if _, ok := bySet[e.set]; !ok {
			order = append(order, e.set)
		}
		bySet[e.set] = append(bySet[e.set], e.elem)
	}
	var msgs []mdnetlink.Message
	for _, set := range order {
		f := mdnetlink.Acknowledge | flags
		if msgType == unix.NFT_MSG_NEWSETELEM {
			f |= mdnetlink.Create
		}
		msgs = append(msgs, nftElemMsg(table, set, msgType, f, bySet[set], withData))
	}
	return msgs
}
