package netops

import (
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
)

// The firewall's matches, each one iptables-nft 1.8.9 lists as an iptables
// match (-s/-d, -i/-o, -m conntrack), and how CHECK compares rules.

// fwMatchAddr is `-s a` (src) or `-d a` in an ip or ip6 table.
func fwMatchAddr(a netip.Addr, src bool) []expr.Any {
	off, n := uint32(16), uint32(4)
	if src {
		off = 12
	}
	if a.Is6() {
		off, n = 24, 16
		if src {
			off = 8
		}
	}
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a.AsSlice()},
	}
}

// fwMatchIf is `-i name` (in) or `-o name`, or `! -i name` with neg.
func fwMatchIf(name string, in, neg bool) []expr.Any {
	key := expr.MetaKeyOIFNAME
	if in {
		key = expr.MetaKeyIIFNAME
	}
	op := expr.CmpOpEq
	if neg {
		op = expr.CmpOpNeq
	}
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: op, Register: 1, Data: ifnameData(name)},
	}
}

// ifnameData is an interface name as iptables-nft compares it: the name and
// its NUL.
func ifnameData(name string) []byte { return append([]byte(name), 0) }

// fwHasRule reports whether rules hold one with w's comment and the same
// address match.
func fwHasRule(rules []*nftables.Rule, w *nftables.Rule) bool {
	want := fwRuleAddr(w)
	owner := fwOwner(w)
	for _, r := range rules {
		if fwOwner(r) == owner && fwRuleAddr(r) == want {
			return true
		}
	}
	return false
}

// fwRuleAddr describes a rule's address match ("-s A" / "-d A"), or "".
func fwRuleAddr(r *nftables.Rule) string {
	for i, e := range r.Exprs {
		pl, ok := e.(*expr.Payload)
		if !ok || i+1 >= len(r.Exprs) {
			continue
		}
		cmp, ok := r.Exprs[i+1].(*expr.Cmp)
		if !ok {
			continue
		}
		a, ok := netip.AddrFromSlice(cmp.Data)
		if !ok {
			continue
		}
		dir := "-d"
		if pl.Offset == 12 || pl.Offset == 8 {
			dir = "-s"
		}
		return dir + " " + a.String()
	}
	return ""
}

// fwCtState is `-m conntrack --ctstate` of the state bits (nftables'
// CtStateBit values are xt_conntrack's). It is the xt match, not nftables'
// ct expression: iptables-nft 1.8.9 calls a table with a ct expression
// incompatible and lists nothing.
func fwCtState(bits uint32) []expr.Any {
	info := &xt.ConntrackMtinfo3{}
	info.MatchFlags = uint16(xt.ConntrackState)
	info.StateMask = uint16(bits)
	return []expr.Any{&expr.Match{Name: "conntrack", Rev: 3, Info: info}}
}

// fwCtStatusDNAT is `-m conntrack --ctstate DNAT`: xt_conntrack's virtual
// state of a connection whose destination was translated.
func fwCtStatusDNAT() []expr.Any {
	const xtStateDNAT = 1 << 7 // XT_CONNTRACK_STATE_DNAT: 1 << (IP_CT_NUMBER + 2)
	return fwCtState(xtStateDNAT)
}
