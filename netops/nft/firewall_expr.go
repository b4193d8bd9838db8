package nft

import (
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The expressions of the firewall's table (inet cnibox-firewall, which
// iptables does not list, so they are nftables' own).

// nfMatch is `meta nfproto p`.
func nfMatch(p byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{p}},
	}
}

// addrTo loads the packet's source (src) or destination address into reg.
func addrTo(v6, src bool, reg uint32) []expr.Any { return []expr.Any{addrPayload(v6, src, reg)} }

// iifnameAfterAddr loads the input interface's name right after an
// address loaded into reg 1 (the key address . ifname).
func iifnameAfterAddr(v6 bool) []expr.Any {
	reg := uint32(unix.NFT_REG32_01)
	if v6 {
		reg = unix.NFT_REG32_04
	}
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: reg}}
}

// mapHas matches when the key in reg 1 is in map: its data goes to a
// register nothing reads (a key-only lookup in a map needs Linux 6.5).
func mapHas(m string) []expr.Any {
	return []expr.Any{&expr.Lookup{SourceRegister: reg1, SetName: m, DestRegister: regMapData, IsDestRegSet: true}}
}

// ctState is `ct state` having one of bits.
func ctState(bits uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Key: expr.CtKeySTATE, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: ne32(bits), Xor: ne32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: ne32(0)},
	}
}

// ctStatusDNAT is `ct status dnat`: a connection whose destination was
// translated (portmap's).
func ctStatusDNAT() []expr.Any {
	return []expr.Any{
		&expr.Ct{Key: expr.CtKeySTATUS, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: ne32(ipsDstNAT), Xor: ne32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: ne32(0)},
	}
}

// markOr is `meta mark set meta mark | bit return`.
func markOr(bit uint32) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: ne32(^bit), Xor: ne32(bit)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: reg1},
		&expr.Counter{},
		&expr.Verdict{Kind: expr.VerdictReturn},
	}
}

// markClear is `meta mark & (pass|drop) != 0 meta mark set meta mark &
// ~(pass|drop)`.
func markClear() []expr.Any {
	both := uint32(FirewallMarkPass | FirewallMarkDrop)
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: ne32(both), Xor: ne32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: ne32(0)},
		&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: ne32(^both), Xor: ne32(0)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: reg1},
	}
}

// markIs is iptables' `-m mark --mark bit/bit` as iptables-nft writes it.
func markIs(bit uint32) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: ne32(bit), Xor: ne32(0)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: ne32(bit)},
	}
}
