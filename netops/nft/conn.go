package nft

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	mdnetlink "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The nftables plumbing every table of cnibox's uses: the Handle's lasting
// connection and the raw socket under it, single gets the nftables package
// cannot build, and address matches (transactions: txn.go).

// nftMsgDestroySetElem deletes set elements and ignores those that do not
// exist (not a missing set or table: ENOENT, as DELSETELEM); Linux 6.3 and
// later.
const nftMsgDestroySetElem = 0x1e

// nftConn returns the lasting nftables connection, opening it on first use.
func (h *Handle) nftConn() (*nftables.Conn, error) {
	if h.nft != nil {
		return h.nft, nil
	}
	var raw *mdnetlink.Conn
	opts := []nftables.ConnOption{
		nftables.AsLasting(),
		// Keep the socket under the Conn for the requests nftables cannot
		// build (single gets, DESTROYSETELEM).
		nftables.WithSockOptions(func(c *mdnetlink.Conn) error { raw = c; return nil }),
	}
	if h.nsFD >= 0 {
		opts = append(opts, nftables.WithNetNSFd(h.nsFD))
	}
	if h.dial != nil {
		opts = append(opts, nftables.WithTestDial(h.dial))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("open nftables connection in %s: %w", h.where(), err)
	}
	if raw == nil {
		_ = c.CloseLasting()
		return nil, fmt.Errorf("open nftables connection in %s: no socket", h.where())
	}
	h.nft, h.nfRaw = c, raw
	return c, nil
}

// nftChainExists reports whether table (of family, an NFPROTO_ value) has a
// chain called name, with one non-dump get.
func (h *Handle) nftChainExists(family uint8, table, name string) (bool, error) {
	return h.nftExists(family, table, unix.NFT_MSG_GETCHAIN, unix.NFTA_CHAIN_TABLE, unix.NFTA_CHAIN_NAME, name)
}

// nftSetExists reports whether table (of family) has a set or map called
// name, with one non-dump get.
func (h *Handle) nftSetExists(family uint8, table, name string) (bool, error) {
	return h.nftExists(family, table, unix.NFT_MSG_GETSET, unix.NFTA_SET_TABLE, unix.NFTA_SET_NAME, name)
}

// nftTableExists reports whether table (of family, an NFPROTO_ value)
// exists, with one non-dump get.
func (h *Handle) nftTableExists(family uint8, table string) (bool, error) {
	return h.nftGetExists(family, unix.NFT_MSG_GETTABLE, table, mdnetlink.Attribute{Type: unix.NFTA_TABLE_NAME, Data: cstr(table)})
}

// nftExists reports whether the object called name exists in table, with
// one non-dump get (msgType NFT_MSG_GETCHAIN or NFT_MSG_GETSET, with that
// type's table and name attributes).
func (h *Handle) nftExists(family uint8, table string, msgType int, tableAttr, nameAttr uint16, name string) (bool, error) {
	return h.nftGetExists(family, msgType, name,
		mdnetlink.Attribute{Type: tableAttr, Data: cstr(table)}, mdnetlink.Attribute{Type: nameAttr, Data: cstr(name)})
}

// nftGetExists sends one non-dump get of type msgType with attrs and
// reports whether the kernel found the object (name, for the error).
func (h *Handle) nftGetExists(family uint8, msgType int, name string, attrs ...mdnetlink.Attribute) (bool, error) {
	data, err := mdnetlink.MarshalAttributes(attrs)
	if err != nil {
		return false, err
	}
	_, err = h.nfRaw.Execute(mdnetlink.Message{
		Header: mdnetlink.Header{
			Type:  mdnetlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | msgType),
			Flags: mdnetlink.Request,
		},
		Data: append(nfgenmsg(family, 0), data...),
	})
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENOENT):
		return false, nil
	}
	return false, fmt.Errorf("get %s: %w", name, err)
}

// nftGetChain gets chain name of table (of family) with one non-dump get:
// its name, hook, priority, type and policy (parseChain); nil, nil when
// it is not there.
// (google/nftables' ListChain is one get too, but loses the kernel's
// ENOENT in its error.)
func (h *Handle) nftGetChain(family uint8, table, name string) (*nftables.Chain, error) {
	data, err := mdnetlink.MarshalAttributes([]mdnetlink.Attribute{
		{Type: unix.NFTA_CHAIN_TABLE, Data: cstr(table)}, {Type: unix.NFTA_CHAIN_NAME, Data: cstr(name)},
	})
	if err != nil {
		return nil, err
	}
	msgs, err := h.nfRaw.Execute(mdnetlink.Message{
		Header: mdnetlink.Header{Type: mdnetlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETCHAIN), Flags: mdnetlink.Request},
		Data:   append(nfgenmsg(family, 0), data...),
	})
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil || len(msgs) != 1 || len(msgs[0].Data) < 4 {
		return nil, fmt.Errorf("get chain %s: %w (%d answers)", name, err, len(msgs))
	}
	ch, _, _, err := parseChain(msgs[0].Data)
	if err != nil {
		return nil, fmt.Errorf("get chain %s: %w", name, err)
	}
	ch.Name, ch.Table = name, &nftables.Table{Name: table, Family: nftables.TableFamily(family)}
	return ch, nil
}

// nfgenmsg returns the nfnetlink header.
func nfgenmsg(family uint8, resID uint16) []byte {
	return append([]byte{family, unix.NFNETLINK_V0}, binaryutil.BigEndian.PutUint16(resID)...)
}

// loadAddr loads the source (src) or destination address of an IPv4 (or,
// with v6, IPv6) packet into register 1 in an inet chain: the packet's
// family is checked first, so the rule does not match the other family.
func loadAddr(src, v6 bool) []expr.Any {
	nfproto, off, n := byte(unix.NFPROTO_IPV4), uint32(16), uint32(4)
	if src {
		off = 12
	}
	if v6 {
		nfproto, off, n = unix.NFPROTO_IPV6, 24, 16
		if src {
			off = 8
		}
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{nfproto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n},
	}
}

// matchPrefix is `ip saddr P` / `ip daddr P` (or ip6, or != with neg) in an
// inet chain.
func matchPrefix(src bool, p netip.Prefix, neg bool) []expr.Any {
	e := loadAddr(src, p.Addr().Is6())
	n := uint32(p.Addr().BitLen() / 8)
	if p.Bits() < p.Addr().BitLen() {
		mask := make([]byte, n)
		for i := 0; i < p.Bits(); i++ {
			mask[i/8] |= 0x80 >> (i % 8)
		}
		e = append(e, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: n, Mask: mask, Xor: make([]byte, n)})
	}
	op := expr.CmpOpEq
	if neg {
		op = expr.CmpOpNeq
	}
	return append(e, &expr.Cmp{Op: op, Register: 1, Data: p.Masked().Addr().AsSlice()})
}
