package nft

import (
	"errors"
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	mdnetlink "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The portmap table's elements, and its postrouting chain, are written with
// raw nftables messages: the element adds need NLM_F_EXCL (a key taken is
// an error, not a silent keep), a removal a timeout on an existing element,
// and the chain's rules ct expressions that the nftables package cannot
// build (portmap_schema.go); the rest of the table is a spec on the core.

const mdExcl = mdnetlink.Excl

// The raw messages' numbers: nft datatype ids (nftables' datatype.h),
// concatenated 6 bits per field, set flags and the rest.
const (
	nftTypeIPAddr   = 7
	nftTypeIP6Addr  = 8
	nftTypeProto    = 12
	nftTypeService  = 13
	nftTypeBits     = 6
	nftSetMap       = 0x8  // NFT_SET_MAP
	nftSetTimeout   = 0x10 // NFT_SET_TIMEOUT
	ipsDstNAT       = 0x20 // IPS_DST_NAT
	ctDirOriginal   = 0    // IP_CT_DIR_ORIGINAL
	nfAccept        = 1    // NF_ACCEPT
	prioSrcNAT      = 100
	pmExprFamily    = unix.NFPROTO_INET
	reg1, reg2      = unix.NFT_REG_1, unix.NFT_REG_2
	regMapData      = unix.NFT_REG_3 // above every key (at most 24 bytes from reg 1)
	reg32at9        = unix.NFT_REG32_01
	reg32at10       = unix.NFT_REG32_02
	reg32at13       = unix.NFT_REG32_05
	nftListElemType = unix.NLA_F_NESTED | unix.NFTA_LIST_ELEM
)

func concatType(types ...uint32) uint32 {
	var t uint32
	for _, x := range types {
		t = t<<nftTypeBits | x
	}
	return t
}

// pmSetNames are the names of the table's maps and sets (pmSetObjs).
var pmSetNames = [...]string{pmSetHostIP4, pmSetHostIP6, pmSetPort4, pmSetPort6, pmSetSnat4, pmSetSnat6, pmSetAll4, pmSetAll6}

// pmSetObjs are the table's maps and sets, with their key and data types,
// in the order of pmSetNames. Every one takes timeouts: a removal sets a
// 1 ms timeout instead of deleting (pmExpireMsgs).
func pmSetObjs() []*nftables.Set {
	c := nftables.MustConcatSetType
	v4, v6, proto, port := nftables.TypeIPAddr, nftables.TypeIP6Addr, nftables.TypeInetProto, nftables.TypeInetService
	m := func(name string, key, data nftables.SetDatatype) *nftables.Set {
		return &nftables.Set{Name: name, KeyType: key, IsMap: true, DataType: data, HasTimeout: true}
	}
	s := func(name string, key nftables.SetDatatype) *nftables.Set {
		return &nftables.Set{Name: name, KeyType: key, HasTimeout: true}
	}
	return []*nftables.Set{
		// host IP . protocol . host port -> pod IP . pod port
		m(pmSetHostIP4, c(v4, proto, port), c(v4, port)),
		m(pmSetHostIP6, c(v6, proto, port), c(v6, port)),
		// protocol . host port -> pod IP . pod port
		m(pmSetPort4, c(proto, port), c(v4, port)),
		m(pmSetPort6, c(proto, port), c(v6, port)),
		// pod IP . pod IP; pod IP
		s(pmSetSnat4, c(v4, v4)), s(pmSetSnat6, c(v6, v6)),
		s(pmSetAll4, v4), s(pmSetAll6, v6),
	}
}

func be32(v uint32) []byte { return binaryutil.BigEndian.PutUint32(v) }
func ne32(v uint32) []byte { return binaryutil.NativeEndian.PutUint32(v) }
func cstr(s string) []byte { return append([]byte(s), 0) }

func attrs(as ...mdnetlink.Attribute) []byte {
	b, err := mdnetlink.MarshalAttributes(as)
	if err != nil {
		panic(fmt.Sprintf("netops: marshal nftables attributes: %v", err)) // only fixed-size, valid attributes are built here
	}
	return b
}

func nested(typ uint16, data []byte) mdnetlink.Attribute {
	return mdnetlink.Attribute{Type: unix.NLA_F_NESTED | typ, Data: data}
}

func pmMsg(msgType int, flags mdnetlink.HeaderFlags, data []byte) mdnetlink.Message {
	return mdnetlink.Message{
		Header: mdnetlink.Header{
			Type:  mdnetlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | msgType),
			Flags: mdnetlink.Request | flags,
		},
		Data: append(nfgenmsg(unix.NFPROTO_INET, 0), data...),
	}
}

// mx marshals one expression.
func mx(e expr.Any) []byte {
	b, err := expr.Marshal(pmExprFamily, e)
	if err != nil {
		panic(fmt.Sprintf("netops: marshal nftables expression %T: %v", e, err)) // fixed expressions built here
	}
	return b
}

// ctOrig loads a field of the connection's original direction tuple
// (the nftables package cannot set the direction of these keys).
func ctOrig(key, reg uint32) []byte {
	return attrs(
		mdnetlink.Attribute{Type: unix.NFTA_EXPR_NAME, Data: cstr("ct")},
		nested(unix.NFTA_EXPR_DATA, attrs(
			mdnetlink.Attribute{Type: unix.NFTA_CT_KEY, Data: be32(key)},
			mdnetlink.Attribute{Type: unix.NFTA_CT_DREG, Data: be32(reg)},
			mdnetlink.Attribute{Type: unix.NFTA_CT_DIRECTION, Data: []byte{ctDirOriginal}},
		)),
	)
}

func nfproto(p byte) [][]byte {
	var out [][]byte
	for _, e := range nfprotoIs(p) {
		out = append(out, mx(e))
	}
	return out
}

// l4proto loads the layer 4 protocol into reg (a raw expression).
func l4proto(reg uint32) []byte { return mx(l4protoExpr(reg)) }

// l4protoExpr loads the layer 4 protocol into reg.
func l4protoExpr(reg uint32) *expr.Meta { return &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg} }

// thDportExpr loads the transport header's destination port into reg.
func thDportExpr(reg uint32) *expr.Payload {
	return &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2}
}

// addrPayload loads the IPv4 or IPv6 source or destination address into
// reg.
func addrPayload(v6, src bool, reg uint32) *expr.Payload {
	off, n := uint32(16), uint32(4)
	switch {
	case v6 && src:
		off, n = 8, 16
	case v6:
		off, n = 24, 16
	case src:
		off = 12
	}
	return &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n}
}

// pmLookup looks register 1 up in set, a map whose data goes to dreg when
// isMap.
func pmLookup(set string, dreg uint32, isMap bool) *expr.Lookup {
	return &expr.Lookup{SourceRegister: reg1, SetName: set, DestRegister: dreg, IsDestRegSet: isMap}
}

// lookup is pmLookup as a raw expression.
func lookup(set string, dreg uint32, isMap bool) []byte { return mx(pmLookup(set, dreg, isMap)) }

// dnatExpr DNATs to the address in reg 1 and the port after it.
func dnatExpr(v6 bool) *expr.NAT {
	if v6 {
		return &expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV6, RegAddrMin: reg1, RegProtoMin: reg2}
	}
	return &expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: reg1, RegProtoMin: reg32at9}
}

func join(parts ...[][]byte) [][]byte {
	var out [][]byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// postroutingRules are the postrouting chain's rules, raw (see
// portmap_schema.go: google/nftables cannot write their ct expressions).
func postroutingRules() [][][]byte {
	dnatted := [][]byte{
		mx(&expr.Ct{Key: expr.CtKeySTATUS, Register: reg1}),
		mx(&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: ne32(ipsDstNAT), Xor: ne32(0)}),
		mx(&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: ne32(0)}),
	}
	jump := func(v6 bool) []byte {
		if v6 {
			return mx(&expr.Verdict{Kind: expr.VerdictJump, Chain: pmChainMasq6})
		}
		return mx(&expr.Verdict{Kind: expr.VerdictJump, Chain: pmChainMasq4})
	}
	// A key-only lookup in a map (no destination register) needs Linux 6.5
	// ("relax set/map validation checks"); older kernels refuse the rule
	// with EINVAL. These rules test only that the key is in the map, so they
	// load its data into a register nothing reads, which every kernel takes.
	inMap := func(set string) []byte { return lookup(set, regMapData, true) }
	return [][][]byte{
		// ct status dnat meta l4proto . ct original proto-dst @port4 jump masq4
		join(dnatted, nfproto(unix.NFPROTO_IPV4), [][]byte{l4proto(reg1), ctOrig(unix.NFT_CT_PROTO_DST, reg32at9),
			inMap(pmSetPort4), jump(false)}),
		// ct status dnat ct original ip daddr . meta l4proto . ct original proto-dst @hostip4 jump masq4
		join(dnatted, nfproto(unix.NFPROTO_IPV4), [][]byte{ctOrig(unix.NFT_CT_DST_IP, reg1), l4proto(reg32at9),
			ctOrig(unix.NFT_CT_PROTO_DST, reg32at10), inMap(pmSetHostIP4), jump(false)}),
		join(dnatted, nfproto(unix.NFPROTO_IPV6), [][]byte{l4proto(reg1), ctOrig(unix.NFT_CT_PROTO_DST, reg32at9),
			inMap(pmSetPort6), jump(true)}),
		join(dnatted, nfproto(unix.NFPROTO_IPV6), [][]byte{ctOrig(unix.NFT_CT_DST_IP6, reg1), l4proto(reg2),
			ctOrig(unix.NFT_CT_PROTO_DST, reg32at13), inMap(pmSetHostIP6), jump(true)}),
	}
}

// pmElemMsgs builds one message per set for elems, with the element data
// and comment when withData (adds), else keys only (deletes, gets).
func pmElemMsgs(msgType int, flags mdnetlink.HeaderFlags, elems []pmElem, withData bool) []mdnetlink.Message {
	return pmElemMsgsTimeout(msgType, flags, elems, withData, 0)
}

// pmElemMsgsTimeout is pmElemMsgs with a timeout (in ms, 0: none) on every
// element.
func pmElemMsgsTimeout(msgType int, flags mdnetlink.HeaderFlags, elems []pmElem, withData bool, timeoutMS uint64) []mdnetlink.Message {
	es := make([]setElem, len(elems))
	for i, e := range elems {
		es[i] = setElem{e.set, nftElem{key: e.key, data: e.data, comment: e.owner, timeoutMS: timeoutMS}}
	}
	return elemMsgs(PortMapTable, msgType, flags, es, withData)
}

// pmGuardedDelete re-adds each element with its data (no change when the
// table holds the same; a clash when the key holds other data, which aborts
// the whole transaction) and deletes it.
func pmGuardedDelete(elems []pmElem) []mdnetlink.Message {
	if len(elems) == 0 {
		return nil
	}
	msgs := pmElemMsgs(unix.NFT_MSG_NEWSETELEM, 0, elems, true)
	return append(msgs, pmElemMsgs(unix.NFT_MSG_DELSETELEM, 0, elems, false)...)
}

// pmExpireMsgs re-adds each element with its data and a timeout of 1 ms
// instead of deleting it: the kernel compares the data (a key that holds
// other data now is a clash, EBUSY, that aborts the transaction, as with
// pmGuardedDelete), lookups and listings skip the element once it has expired
// (within a tick), and the set's garbage collector frees it later. A deletion
// would leave destroy work queued in the kernel that the release of this
// netlink socket, at the latest at process exit, waits for: an RCU grace
// period, 10-15 ms (perf-notes). Needs sets with the timeout flag and a kernel
// that updates the timeout of an existing element (Linux 6.10 or later);
// pmRemove checks both and falls back to deleting.
func pmExpireMsgs(elems []pmElem) []mdnetlink.Message {
	return pmElemMsgsTimeout(unix.NFT_MSG_NEWSETELEM, 0, elems, true, 1)
}

// portmapState is what the port mappings' table learned on a Handle's
// connection: noExpiry, its mappings are deleted, not expired (an old
// table or kernel); expiryChecked, expiry was seen to work (pmRemove).
type portmapState struct{ noExpiry, expiryChecked bool }

// pmRemove removes elems (whose data the caller knows), by expiry where the
// table and kernel allow it, else by a guarded delete. Errors are those of
// the transaction (EBUSY: a key holds other data; ENOENT: no table).
func (h *Handle) pmRemove(elems []pmElem) error {
	if len(elems) == 0 {
		return nil
	}
	st := stateOf[portmapState](h)
	if !st.noExpiry {
		err := h.commitRaw(pmExpireMsgs(elems)...)
		if err == nil {
			if st.expiryChecked || h.pmExpiring(elems[0]) {
				st.expiryChecked = true
				h.expiring = append(h.expiring, expiringElem{table: PortMapTable, set: elems[0].set, key: elems[0].key})
				return nil
			}
			// An older kernel took the element unchanged: delete after all.
		} else if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.EOPNOTSUPP) {
			return err
		}
		st.noExpiry = true // a table from before the timeout flag, or an old kernel
	}
	return h.commitRaw(pmGuardedDelete(elems)...)
}

// pmExpiring reports whether e, just given a timeout, has one (or is gone).
func (h *Handle) pmExpiring(e pmElem) bool {
	msgs, err := h.getElem(PortMapTable, e.set, e.key)
	if err != nil {
		return errors.Is(err, unix.ENOENT)
	}
	for _, m := range msgs {
		_, es, _ := parseNftElems(m.Data)
		for _, x := range es {
			if x.expiring {
				return true
			}
		}
	}
	return false
}

// pmLookup gets the elements with the keys of keys, one single-element get
// each; missing ones (and a missing table) are left out.
func (h *Handle) pmLookup(keys []pmElem) ([]pmElem, error) {
	var out []pmElem
	for _, k := range keys {
		msgs, err := h.getElem(PortMapTable, k.set, k.key)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("get element of %s: %w", k.set, err)
		}
		if out, err = appendElems(out, msgs); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// pmDump lists every element of set; a missing set or table lists nothing.
func (h *Handle) pmDump(set string) ([]pmElem, error) {
	es, err := h.dumpElems(PortMapTable, set)
	if err != nil {
		return nil, err
	}
	return pmElems(set, es), nil
}

// appendElems appends the elements of the NEWSETELEM messages msgs to out.
func appendElems(out []pmElem, msgs []mdnetlink.Message) ([]pmElem, error) {
	for _, m := range msgs {
		es, err := parseElems(m.Data)
		if err != nil {
			return nil, err
		}
		out = append(out, es...)
	}
	return out, nil
}

// parseElems decodes a NEWSETELEM message (after its nfgenmsg header).
func parseElems(b []byte) ([]pmElem, error) {
	set, es, err := parseNftElems(b)
	if err != nil {
		return nil, err
	}
	return pmElems(set, es), nil
}

// pmElems are the port mapping elements es of set.
func pmElems(set string, es []nftElem) []pmElem {
	out := make([]pmElem, 0, len(es))
	for _, e := range es {
		out = append(out, pmElem{set: set, key: e.key, data: e.data, owner: e.comment})
	}
	return out
}
