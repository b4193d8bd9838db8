package nft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	mdnetlink "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Reading a table's rules for the core (core_dump.go): one dump of the
// table's rules (or of one chain's), decoded by google/nftables' own
// expression decoders, as its GetRules does, with one repair first.
//
// google/nftables sends NFTA_CT_DIRECTION as a big-endian uint32 where the
// kernel reads a u8 (ctDir), and the kernel lists it back as the u8 it
// kept: the library's decoder, which wants four bytes, fails the whole
// list on it, so GetRules cannot read a table whose rules load a
// conntrack address (the policy table's, the MultiNetworkPolicy tables').
// Here a one-byte direction is widened to the four bytes the library sent
// ([d 0 0 0], which it decodes as ctDir(d)), so a rule listed back
// compares equal to the rule rendered. The decoder is reached through a
// dynset expression's NFTA_DYNSET_EXPRESSIONS, which the library parses
// with the function GetRules uses on NFTA_RULE_EXPRESSIONS: the same list
// of the same expressions, so every table reads its rules as before.

// dumpRules lists the rules of table (of chain only, when not ""), by
// chain, in order.
func (h *Handle) dumpRules(table *nftables.Table, chain string) (map[string][]*nftables.Rule, error) {
	as := []mdnetlink.Attribute{{Type: unix.NFTA_RULE_TABLE, Data: cstr(table.Name)}}
	if chain != "" {
		as = append(as, mdnetlink.Attribute{Type: unix.NFTA_RULE_CHAIN, Data: cstr(chain)})
	}
	m := pmMsg(unix.NFT_MSG_GETRULE, mdnetlink.Dump, attrs(as...))
	m.Data[0] = byte(table.Family)
	ruleDumps.Add(1)
	msgs, err := h.dump(m)
	if errors.Is(err, unix.ENOENT) {
		return map[string][]*nftables.Rule{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list rules: %w", err)
	}
	out := map[string][]*nftables.Rule{}
	for _, m := range msgs {
		r, name, err := parseRule(byte(table.Family), m.Data)
		if err != nil {
			return nil, fmt.Errorf("list rules: %w", err)
		}
		if r == nil || name.table != table.Name {
			continue
		}
		r.Table = table
		r.Chain = &nftables.Chain{Name: name.chain, Table: table}
		out[name.chain] = append(out[name.chain], r)
	}
	return out, nil
}

// ruleDumps counts the dumps of rules this process asked for (the
// benchmarks report them).
var ruleDumps atomic.Uint64

// ruleOf names a listed rule's table and chain.
type ruleOf struct{ table, chain string }

// parseRule decodes one NFT_MSG_NEWRULE of a dump (b: after the netlink
// header): its handle, user data and expressions; nil for a message too
// short to be one.
func parseRule(fam byte, b []byte) (*nftables.Rule, ruleOf, error) {
	var of ruleOf
	if len(b) < 4 {
		return nil, of, nil
	}
	ad, err := mdnetlink.NewAttributeDecoder(b[4:])
	if err != nil {
		return nil, of, err
	}
	ad.ByteOrder = binary.BigEndian
	r := &nftables.Rule{}
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_RULE_TABLE:
			of.table = ad.String()
		case unix.NFTA_RULE_CHAIN:
			of.chain = ad.String()
		case unix.NFTA_RULE_HANDLE:
			r.Handle = ad.Uint64()
		case unix.NFTA_RULE_POSITION:
			r.Position = ad.Uint64()
		case unix.NFTA_RULE_USERDATA:
			r.UserData = ad.Bytes()
		case unix.NFTA_RULE_EXPRESSIONS:
			list, err := widenCtDirs(ad.Bytes())
			if err != nil {
				return nil, of, err
			}
			var d expr.Dynset
			if err := expr.Unmarshal(fam, attrs(mdnetlink.Attribute{Type: expr.NFTA_DYNSET_EXPRESSIONS, Data: list}), &d); err != nil {
				return nil, of, fmt.Errorf("rule %d of %s: %w", r.Handle, of.chain, err)
			}
			r.Exprs = d.Exprs
		}
	}
	return r, of, ad.Err()
}

// widenCtDirs returns the expression list b (NFTA_LIST_ELEMs) with each
// ct expression's one-byte NFTA_CT_DIRECTION widened to four (see above);
// b itself when there is none.
func widenCtDirs(b []byte) ([]byte, error) {
	elems, err := mdnetlink.UnmarshalAttributes(b)
	if err != nil {
		return nil, err
	}
	changed := false
	for i, el := range elems {
		as, err := mdnetlink.UnmarshalAttributes(el.Data)
		if err != nil {
			return nil, err
		}
		isCt := false
		for _, a := range as {
			if a.Type&^unix.NLA_F_NESTED == unix.NFTA_EXPR_NAME && string(a.Data) == "ct\x00" {
				isCt = true
			}
		}
		if !isCt {
			continue
		}
		for j, a := range as {
			if a.Type&^unix.NLA_F_NESTED != unix.NFTA_EXPR_DATA {
				continue
			}
			data, err := mdnetlink.UnmarshalAttributes(a.Data)
			if err != nil {
				return nil, err
			}
			widened := false
			for k, d := range data {
				if d.Type == unix.NFTA_CT_DIRECTION && len(d.Data) == 1 {
					data[k].Data, data[k].Length = []byte{d.Data[0], 0, 0, 0}, 0
					widened = true
				}
			}
			if !widened {
				continue
			}
			// (Length 0: MarshalAttributes infers it; the length read would
			// be kept.)
			as[j].Length = 0
			if as[j].Data, err = mdnetlink.MarshalAttributes(data); err != nil {
				return nil, err
			}
			elems[i].Length = 0
			if elems[i].Data, err = mdnetlink.MarshalAttributes(as); err != nil {
				return nil, err
			}
			changed = true
		}
	}
	if !changed {
		return b, nil
	}
	return mdnetlink.MarshalAttributes(elems)
}
