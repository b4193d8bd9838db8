package nft

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The via-host rules do what Azure's ebtables broute rules for
// ipsToRouteViaHost do in bridge mode: an IPv4 frame a pod sends to one of
// those addresses (node-local DNS) goes up to the node's own stack instead
// of being bridged to the fabric's gateway, by taking the bridge's MAC as
// its destination before the bridge looks it up:
//
//	table bridge cnibox-viahost {
//		map via-host { type ipv4_addr : ether_addr }   # address -> bridge MAC
//		chain via-host-pre {
//			type filter hook prerouting priority -300; policy accept;
//			ether type ip ether daddr set ip daddr map @via-host meta pkttype set host
//		}
//	}
//
// A table of its own, apart from the fabric rules of table bridge cnibox.
const (
	ViaHostTable = "cnibox-viahost"
	viaHostMap   = "via-host"
	viaHostPre   = "via-host-pre"
)

func viaHostObjects() (*nftables.Table, *nftables.Set) {
	table := &nftables.Table{Name: ViaHostTable, Family: nftables.TableFamilyBridge}
	return table, &nftables.Set{Table: table, Name: viaHostMap, IsMap: true, KeyType: nftables.TypeIPAddr, DataType: nftables.TypeEtherAddr}
}

// EnsureViaHost makes IPv4 frames bridged to any of ips go to mac (the
// bridge's own, so the node's stack takes them). The rule is installed
// once; an element with another MAC is replaced.
func (h *Handle) EnsureViaHost(ips []netip.Addr, mac net.HardwareAddr) error {
	if len(mac) != 6 {
		return fmt.Errorf("ensure via-host addresses: %q is not an Ethernet address", mac)
	}
	var elems []nftables.SetElement
	for _, ip := range ips {
		if !ip.Unmap().Is4() {
			return fmt.Errorf("ensure via-host addresses: %v is not an IPv4 address", ip)
		}
		a := ip.Unmap().As4()
		elems = append(elems, nftables.SetElement{Key: a[:], Val: mac})
	}
	if len(elems) == 0 {
		return nil
	}
	if err := h.ensureViaHostRule(); err != nil {
		return fmt.Errorf("install the via-host rule in %s: %w", h.where(), classify(err))
	}
	_, set := viaHostObjects()
	if err := h.putElems(set, elems); err != nil {
		return fmt.Errorf("ensure via-host addresses %v -> %s in %s: %w", ips, mac, h.where(), classify(err))
	}
	return nil
}

// ensureViaHostRule reconciles the table (viaHostTable) when its chain is
// missing (one get otherwise: this runs on a pod's ADD).
func (h *Handle) ensureViaHostRule() error {
	if _, err := h.nftConn(); err != nil {
		return err
	}
	ok, err := h.nftChainExists(unix.NFPROTO_BRIDGE, ViaHostTable, viaHostPre)
	if err != nil || ok {
		return err
	}
	_, err = h.reconcile(viaHostTable())
	return err
}

// viaHostTable is the via-host table: its map, whose elements are the
// addresses', and its chain.
func viaHostTable() *tableSpec {
	table, set := viaHostObjects()
	rule := &nftables.Rule{Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyPROTOCOL, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(unix.ETH_P_IP)},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Lookup{SourceRegister: 1, SetName: set.Name, IsDestRegSet: true, DestRegister: 1},
		&expr.Payload{OperationType: expr.PayloadWrite, SourceRegister: 1, Base: expr.PayloadBaseLLHeader, Offset: 0, Len: 6},
		// The bridge classed the frame by its old destination before the
		// hook: the node's stack drops it unless it is for the host.
		&expr.Immediate{Register: 1, Data: []byte{unix.PACKET_HOST}},
		&expr.Meta{Key: expr.MetaKeyPKTTYPE, SourceRegister: true, Register: 1},
	}}
	return &tableSpec{table: table, owned: true, what: "the via-host rule", sets: []setSpec{{set: set, kept: true}},
		chains: []chainSpec{baseChain(viaHostPre, nftables.ChainTypeFilter, *nftables.ChainHookPrerouting, -300, []*nftables.Rule{rule})}}
}

// ViaHost returns the via-host elements: address -> MAC (none when the
// table is not there).
func (h *Handle) ViaHost() (map[netip.Addr]net.HardwareAddr, error) {
	c, err := h.nftConn()
	if err != nil {
		return nil, err
	}
	ok, err := h.nftSetExists(unix.NFPROTO_BRIDGE, ViaHostTable, viaHostMap)
	if err != nil || !ok {
		return nil, err
	}
	_, set := viaHostObjects()
	elems, err := c.GetSetElements(set)
	if err != nil {
		return nil, fmt.Errorf("list via-host addresses in %s: %w", h.where(), classify(err))
	}
	out := map[netip.Addr]net.HardwareAddr{}
	for _, e := range elems {
		if a, ok := netip.AddrFromSlice(e.Key); ok && len(e.Val) >= 6 {
			out[a.Unmap()] = net.HardwareAddr(e.Val[:6])
		}
	}
	return out, nil
}

// DeleteViaHost removes the via-host table (not being there is no error).
func (h *Handle) DeleteViaHost() error {
	table, _ := viaHostObjects()
	if err := h.deleteTable(table); err != nil {
		return fmt.Errorf("delete the via-host table in %s: %w", h.where(), err)
	}
	return nil
}
