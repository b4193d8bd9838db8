package nft

import (
	"fmt"
	"math/bits"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
)

// The overlay's forward rules (flannel's --iptables-forward-rules): the
// cluster network accepted in the node's forward path both ways, so that
// pod traffic between nodes passes a FORWARD policy of DROP (Docker sets
// it). They sit where the firewall role's rules sit (fwPlaces): in
// iptables-nft's table filter when it has a chain FORWARD, since a drop in
// any base chain of the hook is final and only a rule in that chain can
// accept first; else in a table of cnibox's own. The chain and the rules
// are flannel's own, as its iptables mode writes them:
//
//	-A FORWARD -m comment --comment "flanneld forward" -j FLANNEL-FWD
//	-A FLANNEL-FWD -s 10.244.0.0/16 -m comment --comment "flanneld forward" -j ACCEPT
//	-A FLANNEL-FWD -d 10.244.0.0/16 -m comment --comment "flanneld forward" -j ACCEPT
//
// so a node moving between flanneld and cnibox-agent keeps one set of them
// (each finds the other's in place), and `iptables -L` lists them.
const (
	// OverlayForwardChain is flannel's chain.
	OverlayForwardChain = "FLANNEL-FWD"
	// OverlayForwardTable is cnibox's own table (families ip and ip6) when
	// iptables-nft's filter table is not there.
	OverlayForwardTable = "cnibox-overlay-forward"
	overlayFwdComment   = "flanneld forward"
)

// EnsureOverlayForward makes the forward path accept nets (the cluster
// networks, at most one per family is usual): for each family with a
// network, the jump to FLANNEL-FWD is appended to the base chain when
// missing, and FLANNEL-FWD is rewritten when it does not hold exactly the
// accepts of the family's networks. changed reports that something was
// missing (a first start, or someone flushed the rules). A check that finds
// everything in place is two dumps per family and no change.
func (h *Handle) EnsureOverlayForward(nets []netip.Prefix) (changed bool, err error) {
	places, err := h.fwPlaces()
	if err != nil {
		return false, err
	}
	for _, p := range places {
		var mine []netip.Prefix
		for _, n := range nets {
			if n.Addr().Is6() == p.is6() {
				mine = append(mine, n.Masked())
			}
		}
		if len(mine) == 0 {
			continue
		}
		if p.own {
			p.table = &nftables.Table{Family: p.table.Family, Name: OverlayForwardTable}
		}
		ch, err := h.ensureOverlayForward(p, mine)
		if err != nil {
			return changed, err
		}
		changed = changed || ch
	}
	return changed, nil
}

// ensureOverlayForward reconciles place p with the accepts of nets: the
// jump in its base chain (iptables' FORWARD, appended to when missing,
// whoever's rules are there) and FLANNEL-FWD's rules, compared by what
// they accept (acceptKey), so that flanneld's count as cnibox's.
func (h *Handle) ensureOverlayForward(p fwPlace, nets []netip.Prefix) (bool, error) {
	ud := userdata.AppendString(nil, userdata.TypeComment, overlayFwdComment)
	base := chainSpec{name: fwIptablesForward, appendOnly: true,
		rules: []*nftables.Rule{{UserData: ud, Exprs: []expr.Any{&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictJump, Chain: OverlayForwardChain}}}},
		same:  func(have, _ *nftables.Rule) bool { return fwFindJump([]*nftables.Rule{have}, OverlayForwardChain) == 0 }}
	if p.own {
		base.name, base.hook, base.typ, base.prio = fwOwnBaseChain, nftables.ChainHookForward, nftables.ChainTypeFilter, nftables.ChainPriorityFilter
	}
	fwd := chainSpec{name: OverlayForwardChain, same: func(have, want *nftables.Rule) bool { return acceptKey(have) == acceptKey(want) }}
	for _, n := range nets {
		for _, src := range []bool{true, false} {
			fwd.rules = append(fwd.rules, &nftables.Rule{Table: p.table, UserData: ud,
				Exprs: append(ipPrefixMatch(src, n), &expr.Counter{}, &expr.Verdict{Kind: expr.VerdictAccept})})
		}
	}
	changed, err := h.reconcile(&tableSpec{table: p.table, what: "the overlay's forward rules", chains: []chainSpec{base, fwd}})
	if err != nil {
		return false, fmt.Errorf("add the forward rules of %v in %s %s of %s: %w", nets, familyName(p), p.table.Name, h.where(), classify(err))
	}
	return changed, nil
}

// ipPrefixMatch is `-s P` (src) or `-d P` in an ip or ip6 table, as
// iptables-nft writes it: a prefix on a byte boundary compares that many
// bytes of the address, any other masks the whole address first.
func ipPrefixMatch(src bool, p netip.Prefix) []expr.Any {
	off := uint32(16)
	if src {
		off = 12
	}
	if p.Addr().Is6() {
		off = 24
		if src {
			off = 8
		}
	}
	addr := p.Masked().Addr().AsSlice()
	if p.Bits()%8 == 0 {
		n := uint32(p.Bits() / 8)
		return []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: addr[:n]},
		}
	}
	n := uint32(len(addr))
	mask := make([]byte, n)
	for i := 0; i < p.Bits(); i++ {
		mask[i/8] |= 0x80 >> (i % 8)
	}
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: n, Mask: mask, Xor: make([]byte, n)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: addr},
	}
}

// acceptKey describes a rule as "-s P ACCEPT" (its comment, address match
// and verdict), so rules written by iptables-nft (flanneld) and by cnibox
// compare equal; "" for any other rule.
func acceptKey(r *nftables.Rule) string {
	var (
		dir     string
		v6      = r.Table != nil && r.Table.Family == nftables.TableFamilyIPv6
		maskLen = -1
		data    []byte
		verdict string
	)
	for _, e := range r.Exprs {
		switch e := e.(type) {
		case *expr.Payload:
			if e.Base != expr.PayloadBaseNetworkHeader {
				return ""
			}
			switch e.Offset {
			case 12, 8:
				dir = "-s"
			case 16, 24:
				dir = "-d"
			default:
				return ""
			}
			maskLen = int(e.Len) * 8
		case *expr.Bitwise:
			maskLen = 0
			for _, b := range e.Mask {
				maskLen += bits.OnesCount8(b)
			}
		case *expr.Cmp:
			if e.Op != expr.CmpOpEq {
				return ""
			}
			data = e.Data
		case *expr.Verdict:
			verdict = "verdict " + fmt.Sprint(e.Kind)
			if e.Kind == expr.VerdictAccept {
				verdict = "ACCEPT"
			}
		case *expr.Counter:
		default:
			return ""
		}
	}
	comment, _ := userdata.GetString(r.UserData, userdata.TypeComment)
	size := 4
	if v6 {
		size = 16
	}
	full := make([]byte, size)
	copy(full, data)
	a, ok := netip.AddrFromSlice(full)
	if dir == "" || !ok || maskLen < 0 || verdict == "" {
		return ""
	}
	return fmt.Sprintf("%s %s %s %q", dir, netip.PrefixFrom(a, maskLen), verdict, comment)
}

// OverlayForward lists the accepts of FLANNEL-FWD in every place ("-s P
// ACCEPT" ...), for checks and the CLI.
func (h *Handle) OverlayForward() ([]string, error) {
	places, err := h.fwPlaces()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range places {
		if p.own {
			p.table = &nftables.Table{Family: p.table.Family, Name: OverlayForwardTable}
		}
		rules, err := h.fwRules(p, OverlayForwardChain)
		if err != nil {
			return nil, err
		}
		for _, r := range rules {
			out = append(out, p.table.Name+" "+acceptKey(r))
		}
	}
	return out, nil
}
