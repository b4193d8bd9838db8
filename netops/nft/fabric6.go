package nft

import (
	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The IPv6 part of the fabric rules. IPv6 has no ARP: a neighbour's MAC
// travels in the link-layer address options of ICMPv6 neighbour discovery,
// so besides the Ethernet source MAC (rewritten for every frame by the IPv4
// rules' last rule) those options are rewritten too, with the ICMPv6
// checksum fixed up by the kernel (csum_type inet):
//
//	map fabric-pods6 { type ipv6_addr : ether_addr } # pod IPv6 -> pod MAC
//	chain fabric-pre {
//		# IPv6 to a pod (the fabric's answers to its neighbour
//		# solicitations among them): the pod's MAC
//		iifname @fabric-uplinks ether type ip6 ether daddr set ip6 daddr map @fabric-pods6
//	}
//	chain fabric-post {
//		# a pod's neighbour advertisement (its answer to the fabric's
//		# solicitation for the pod's IPv6) names the NIC's MAC as the target's
//		ether type ip6 meta l4proto ipv6-icmp icmpv6 type nd-neighbor-advert @th,192,16 0x0201 @th,208,48 set oifname map @fabric-uplinks
//		# its neighbour and router solicitations name the NIC's MAC as the source's
//		ether type ip6 meta l4proto ipv6-icmp icmpv6 type nd-neighbor-solicit @th,192,16 0x0101 @th,208,48 set oifname map @fabric-uplinks
//		ether type ip6 meta l4proto ipv6-icmp icmpv6 type nd-router-solicit @th,64,16 0x0101 @th,80,48 set oifname map @fabric-uplinks
//	}
//
// The options are rewritten where Linux puts them: first after the fixed
// part of the message (an advertisement sent without a target link-layer
// address option, as an answer to a unicast probe, needs no rewrite).
const fabricPods6 = "fabric-pods6"

// nd* describe the neighbour discovery messages whose first option carries
// the sender's MAC: ICMPv6 type, the option's offset in the message, and the
// option type (1 source, 2 target link-layer address).
var ndOptions = []struct {
	icmpType, optType uint8
	off               uint32
}{
	{icmpType: 136, optType: 2, off: 24}, // neighbour advertisement
	{icmpType: 135, optType: 1, off: 24}, // neighbour solicitation
	{icmpType: 133, optType: 1, off: 8},  // router solicitation
}

func fabricPods6Set(table *nftables.Table) *nftables.Set {
	return &nftables.Set{Table: table, Name: fabricPods6, IsMap: true, KeyType: nftables.TypeIP6Addr, DataType: nftables.TypeEtherAddr}
}

// fabric6Rules are the IPv6 rules of the fabric chains (pre and post),
// with the maps named uplinks and pods6.
func fabric6Rules(uplinks, pods6 string) (pre, post []*nftables.Rule) {
	ipv6 := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyPROTOCOL, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(unix.ETH_P_IPV6)},
	}
	// IPv6 for a pod: its MAC.
	ex := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Lookup{SourceRegister: 1, SetName: uplinks, IsDestRegSet: true, DestRegister: 2},
	}
	ex = append(ex, ipv6...)
	ex = append(ex,
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 24, Len: 16},
		&expr.Lookup{SourceRegister: 1, SetName: pods6, IsDestRegSet: true, DestRegister: 1},
		&expr.Payload{OperationType: expr.PayloadWrite, SourceRegister: 1, Base: expr.PayloadBaseLLHeader, Offset: 0, Len: 6},
	)
	pre = append(pre, &nftables.Rule{Exprs: ex})

	// Out through the NIC: the NIC's MAC in the link-layer address options.
	for _, nd := range ndOptions {
		ex := append([]expr.Any{}, ipv6...)
		ex = append(ex,
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_ICMPV6}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{nd.icmpType}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: nd.off, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{nd.optType, 1}},
			&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
			&expr.Lookup{SourceRegister: 1, SetName: uplinks, IsDestRegSet: true, DestRegister: 1},
			&expr.Payload{OperationType: expr.PayloadWrite, SourceRegister: 1, Base: expr.PayloadBaseTransportHeader,
				Offset: nd.off + 2, Len: 6, CsumType: expr.CsumTypeInet, CsumOffset: 2},
		)
		post = append(post, &nftables.Rule{Exprs: ex})
	}
	return pre, post
}
