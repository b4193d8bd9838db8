package nft

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/cnibox/cnibox/netops/internal/ifname"
	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The fabric rules do what Azure's ebtables rules do in bridge mode: the
// cloud's fabric delivers frames only for MACs it knows, so every frame
// leaving through the node's NIC carries the NIC's MAC, and frames for a pod
// IP coming in get the pod's MAC back. They live in the bridge table next to
// the MAC spoofing check:
//
//	table bridge cnibox {
//		map fabric-uplinks { type ifname : ether_addr }    # NIC -> its MAC
//		map fabric-pods    { type ipv4_addr : ether_addr } # pod IP -> pod MAC
//		chain fabric-pre {
//			type filter hook prerouting priority -300; policy accept;
//			# ARP replies to the NIC's MAC reach the pods too
//			iifname @fabric-uplinks arp operation reply ether daddr set ff:ff:ff:ff:ff:ff
//			# IPv4 to a pod: the pod's MAC
//			iifname @fabric-uplinks ether type ip ether daddr set ip daddr map @fabric-pods
//		}
//		chain fabric-post {
//			type filter hook postrouting priority 300; policy accept;
//			# ARP of pods (replies to the fabric's requests for pod IPs
//			# among them) names the NIC's MAC
//			ether type arp arp htype 1 arp hlen 6 arp saddr ether set oifname map @fabric-uplinks
//			ether saddr set oifname map @fabric-uplinks
//		}
//	}
//
// The rules never change; a NIC and a pod are one map element each (per
// address). fabric6.go adds the IPv6 equivalents (map fabric-pods6).
const (
	fabricPre     = "fabric-pre"
	fabricPost    = "fabric-post"
	fabricUplinks = "fabric-uplinks"
	fabricPods    = "fabric-pods"
)

var broadcastMAC = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

func fabricObjects() (table *nftables.Table, uplinks, pods *nftables.Set) {
	table = &nftables.Table{Name: MasqTable, Family: nftables.TableFamilyBridge}
	uplinks = &nftables.Set{Table: table, Name: fabricUplinks, IsMap: true, KeyType: nftables.TypeIFName, DataType: nftables.TypeEtherAddr}
	pods = &nftables.Set{Table: table, Name: fabricPods, IsMap: true, KeyType: nftables.TypeIPAddr, DataType: nftables.TypeEtherAddr}
	return table, uplinks, pods
}

// EnsureFabricUplink installs the fabric rules (once) and makes frames
// leaving through uplink carry mac; frames entering through it reach pods
// registered with EnsureFabricPods.
func (h *Handle) EnsureFabricUplink(uplink string, mac net.HardwareAddr) error {
	if err := ifname.Check("ensure fabric uplink", uplink); err != nil {
		return err
	}
	if len(mac) != 6 {
		return fmt.Errorf("ensure fabric uplink %q: %q is not an Ethernet address", uplink, mac)
	}
	if err := h.ensureFabricRules(); err != nil {
		return fmt.Errorf("install the fabric rules in %s: %w", h.where(), classify(err))
	}
	_, uplinks, _ := fabricObjects()
	if err := h.putElems(uplinks, []nftables.SetElement{{Key: ifnameKey(uplink), Val: mac}}); err != nil {
		return fmt.Errorf("ensure fabric uplink %q (%s) in %s: %w", uplink, mac, h.where(), classify(err))
	}
	return nil
}

// ensureFabricRules reconciles the fabric's part of table bridge cnibox
// (fabricTable) when one of its chains or the IPv6 map is missing (rules
// installed before the IPv6 ones existed lack it): three gets otherwise,
// as this runs on a pod's ADD.
func (h *Handle) ensureFabricRules() error {
	if _, err := h.nftConn(); err != nil {
		return err
	}
	pre, err := h.nftChainExists(unix.NFPROTO_BRIDGE, MasqTable, fabricPre)
	if err != nil {
		return err
	}
	post, err := h.nftChainExists(unix.NFPROTO_BRIDGE, MasqTable, fabricPost)
	if err != nil {
		return err
	}
	v6, err := h.nftSetExists(unix.NFPROTO_BRIDGE, MasqTable, fabricPods6)
	if err != nil || (pre && post && v6) {
		return err
	}
	_, err = h.reconcile(fabricTable())
	return err
}

// fabricTable is the fabric's part of table bridge cnibox (the MAC
// spoofing check has the rest): its maps, whose elements are the pods'
// and the uplinks', and its two chains.
func fabricTable() *tableSpec {
	table, uplinks, pods := fabricObjects()
	pods6 := fabricPods6Set(table)
	inUplink := func(key expr.MetaKey) []expr.Any {
		return []expr.Any{
			&expr.Meta{Key: key, Register: 1},
			&expr.Lookup{SourceRegister: 1, SetName: uplinks.Name, IsDestRegSet: true, DestRegister: 2},
		}
	}
	proto := func(p uint16) []expr.Any {
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyPROTOCOL, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(p)},
		}
	}
	nh := func(off, n uint32, want []byte) []expr.Any {
		return []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: want},
		}
	}
	write := func(base expr.PayloadBase, off uint32) expr.Any {
		return &expr.Payload{OperationType: expr.PayloadWrite, SourceRegister: 1, Base: base, Offset: off, Len: 6}
	}
	rule := func(parts ...[]expr.Any) *nftables.Rule { return &nftables.Rule{Exprs: slices.Concat(parts...)} }
	preRules := []*nftables.Rule{
		// ARP replies from the fabric go to the NIC's MAC: broadcast them
		// so the pod that asked sees its answer.
		rule(inUplink(expr.MetaKeyIIFNAME), proto(unix.ETH_P_ARP), nh(6, 2, binaryutil.BigEndian.PutUint16(2)),
			[]expr.Any{&expr.Immediate{Register: 1, Data: broadcastMAC}, write(expr.PayloadBaseLLHeader, 0)}),
		// IPv4 for a pod: its MAC.
		rule(inUplink(expr.MetaKeyIIFNAME), proto(unix.ETH_P_IP), []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Lookup{SourceRegister: 1, SetName: pods.Name, IsDestRegSet: true, DestRegister: 1},
			write(expr.PayloadBaseLLHeader, 0),
		}),
	}
	postRules := []*nftables.Rule{
		// Out through the NIC: the NIC's MAC, in ARP's sender field too.
		rule(proto(unix.ETH_P_ARP), nh(0, 2, binaryutil.BigEndian.PutUint16(1)), nh(4, 1, []byte{6}), []expr.Any{
			&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
			&expr.Lookup{SourceRegister: 1, SetName: uplinks.Name, IsDestRegSet: true, DestRegister: 1},
			write(expr.PayloadBaseNetworkHeader, 8),
		}),
		rule([]expr.Any{
			&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
			&expr.Lookup{SourceRegister: 1, SetName: uplinks.Name, IsDestRegSet: true, DestRegister: 1},
			write(expr.PayloadBaseLLHeader, 6),
		}),
	}
	pre6, post6 := fabric6Rules(uplinks.Name, pods6.Name)
	return &tableSpec{table: table, what: "the fabric rules",
		sets: []setSpec{{set: uplinks, kept: true}, {set: pods, kept: true}, {set: pods6, kept: true}},
		chains: []chainSpec{
			baseChain(fabricPre, nftables.ChainTypeFilter, *nftables.ChainHookPrerouting, -300, append(preRules, pre6...)),
			baseChain(fabricPost, nftables.ChainTypeFilter, *nftables.ChainHookPostrouting, 300, append(postRules, post6...)),
		},
	}
}

// EnsureFabricPods makes IPv4 and IPv6 frames for ips that enter through a
// fabric uplink go to mac (the pod's). An element with another MAC (a pod
// that was re-created) is replaced.
func (h *Handle) EnsureFabricPods(ips []netip.Addr, mac net.HardwareAddr) error {
	if len(mac) != 6 {
		return fmt.Errorf("ensure fabric pods %v: %q is not an Ethernet address", ips, mac)
	}
	table, _, pods := fabricObjects()
	for _, set := range []*nftables.Set{pods, fabricPods6Set(table)} {
		var elems []nftables.SetElement
		for _, a := range ips {
			if a = a.Unmap(); a.Is4() == (set.Name == fabricPods) {
				elems = append(elems, nftables.SetElement{Key: a.AsSlice(), Val: mac})
			}
		}
		if len(elems) == 0 {
			continue
		}
		err := h.putElems(set, elems)
		if errors.Is(err, unix.ENOENT) {
			// Rules of an older cnibox, without the IPv6 map: replace them.
			if err = h.ensureFabricRules(); err == nil {
				err = h.putElems(set, elems)
			}
		}
		if err != nil {
			return fmt.Errorf("ensure fabric pods %v (%s) in %s: %w", ips, mac, h.where(), classify(err))
		}
	}
	return nil
}

// putElems adds map elements; ones that exist with other data are replaced.
func (h *Handle) putElems(set *nftables.Set, elems []nftables.SetElement) error {
	t, err := h.begin()
	if err != nil {
		return err
	}
	c := t.conn()
	if err := c.SetAddElements(set, elems); err != nil {
		return err
	}
	err = t.commit()
	if !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.EEXIST) {
		return err
	}
	have, err := c.GetSetElements(set)
	if err != nil {
		return err
	}
	var stale []nftables.SetElement
	for _, e := range elems {
		for _, o := range have {
			if bytes.Equal(o.Key, e.Key) && !bytes.Equal(o.Val, e.Val) {
				stale = append(stale, nftables.SetElement{Key: e.Key})
			}
		}
	}
	if len(stale) > 0 {
		if err := c.SetDeleteElements(set, stale); err != nil {
			return err
		}
	}
	if err := c.SetAddElements(set, elems); err != nil {
		return err
	}
	return t.commit()
}

// DeleteFabricPods removes the elements of ips, in one nftables
// transaction. Missing elements, maps and tables are not an error.
func (h *Handle) DeleteFabricPods(ips []netip.Addr) error {
	want := map[netip.Addr]bool{}
	for _, a := range ips {
		want[a.Unmap()] = true
	}
	if len(want) == 0 {
		return nil
	}
	have, err := h.FabricPods()
	if err != nil {
		return err
	}
	var del4, del6 []nftables.SetElement
	for a := range have {
		switch {
		case !want[a]:
		case a.Is4():
			del4 = append(del4, nftables.SetElement{Key: a.AsSlice()})
		default:
			del6 = append(del6, nftables.SetElement{Key: a.AsSlice()})
		}
	}
	if len(del4)+len(del6) == 0 {
		return nil
	}
	t, err := h.begin()
	if err == nil {
		table, _, pods := fabricObjects()
		if len(del4) > 0 {
			err = t.conn().SetDeleteElements(pods, del4)
		}
		if err == nil && len(del6) > 0 {
			err = t.conn().SetDeleteElements(fabricPods6Set(table), del6)
		}
		if err == nil {
			err = t.commit()
		}
	}
	if err != nil {
		return fmt.Errorf("delete fabric pods %v in %s: %w", ips, h.where(), classify(err))
	}
	return nil
}

// FabricPods returns the pod IPs of the fabric rules with their MACs.
func (h *Handle) FabricPods() (map[netip.Addr]net.HardwareAddr, error) {
	out := map[netip.Addr]net.HardwareAddr{}
	table, _, pods := fabricObjects()
	for _, set := range []*nftables.Set{pods, fabricPods6Set(table)} {
		elems, err := h.fabricElems(set)
		if err != nil {
			return nil, fmt.Errorf("list fabric pods in %s: %w", h.where(), err)
		}
		for _, e := range elems {
			if a, ok := netip.AddrFromSlice(e.Key); ok {
				out[a] = net.HardwareAddr(e.Val)
			}
		}
	}
	return out, nil
}

// FabricUplinks returns the NICs of the fabric rules with their MACs.
func (h *Handle) FabricUplinks() (map[string]net.HardwareAddr, error) {
	out := map[string]net.HardwareAddr{}
	_, uplinks, _ := fabricObjects()
	elems, err := h.fabricElems(uplinks)
	if err != nil {
		return nil, fmt.Errorf("list fabric uplinks in %s: %w", h.where(), err)
	}
	for _, e := range elems {
		out[string(bytes.TrimRight(e.Key, "\x00"))] = net.HardwareAddr(e.Val)
	}
	return out, nil
}

// fabricElems lists a fabric map's elements; a missing map has none.
func (h *Handle) fabricElems(set *nftables.Set) ([]nftables.SetElement, error) {
	c, err := h.nftConn()
	if err != nil {
		return nil, err
	}
	exists, err := h.nftSetExists(unix.NFPROTO_BRIDGE, MasqTable, set.Name)
	if err != nil || !exists {
		return nil, err
	}
	return c.GetSetElements(set)
}

// DeleteFabric removes the fabric chains and maps (the other objects of the
// bridge table stay). Missing ones are not an error.
func (h *Handle) DeleteFabric() error {
	if err := h.remove(fabricTable()); err != nil {
		return fmt.Errorf("delete the fabric rules in %s: %w", h.where(), classify(err))
	}
	return nil
}
