package nft

import (
	"errors"
	"fmt"
	"net"

	"github.com/cnibox/cnibox/netops/internal/ifname"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The MAC spoofing check lives in a bridge-family table of its own:
//
//	table bridge cnibox {
//		map macspoof { type ifname : verdict }  # host veth -> jump s-<veth>
//		chain prerouting {
//			type filter hook prerouting priority -300; policy accept;
//			iifname vmap @macspoof
//		}
//		chain s-<veth> {   # one per checked port
//			ether saddr <pod MAC> return
//			drop
//		}
//	}
//
// Frames from ports without an element pass untouched; a pod costs one map
// element and one small chain, whatever the number of pods.
const (
	spoofBaseChain = "prerouting"
	spoofMap       = "macspoof"
)

// MacSpoofChain returns the name of the chain that checks frames entering
// the bridge from port.
func MacSpoofChain(port string) string { return "s-" + port }

// EnsureMacSpoofCheck makes the bridge drop frames that enter it from port
// (a host veth) with a source MAC other than mac. Called again for the same
// port, it replaces the allowed MAC.
func (h *Handle) EnsureMacSpoofCheck(port string, mac net.HardwareAddr) error {
	if err := ifname.Check("ensure mac spoof check", port); err != nil {
		return err
	}
	if len(mac) != 6 {
		return fmt.Errorf("ensure mac spoof check on %q: %q is not an Ethernet address", port, mac)
	}
	if err := h.ensureMacSpoofCheck(port, mac); err != nil {
		return fmt.Errorf("ensure mac spoof check on %q (%s) in %s: %w", port, mac, h.where(), classify(err))
	}
	return nil
}

// ensureMacSpoofCheck writes port's chain and element (macSpoofPort: one
// transaction without a dump, which rewrites the chain: the MAC may have
// changed) where the check's base chain is there, one get telling; else
// it reconciles the check's whole part of the table.
func (h *Handle) ensureMacSpoofCheck(port string, mac net.HardwareAddr) error {
	if _, err := h.nftConn(); err != nil {
		return err
	}
	ok, err := h.nftChainExists(unix.NFPROTO_BRIDGE, MasqTable, spoofBaseChain)
	if err != nil {
		return err
	}
	if ok {
		if err = h.write(macSpoofPort(port, mac)); err == nil {
			return nil
		}
	}
	s := macSpoofPort(port, mac)
	s.chains = append(s.chains, macSpoofBase())
	_, err = h.reconcile(s)
	return err
}

// macSpoofPort is port's part of the MAC spoofing check in table bridge
// cnibox: its element in the map (whose other elements are the other
// ports') and its chain. macSpoofBase is the check's base chain.
func macSpoofPort(port string, mac net.HardwareAddr) *tableSpec {
	table, set := spoofObjects()
	name := MacSpoofChain(port)
	return &tableSpec{table: table, what: "the mac spoof check",
		sets: []setSpec{{set: set, kept: true, elems: []nftables.SetElement{{
			Key: ifnameKey(port), VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: name},
		}}}},
		chains: []chainSpec{{name: name, rules: []*nftables.Rule{
			{Exprs: []expr.Any{
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseLLHeader, Offset: 6, Len: 6},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(mac)},
				&expr.Verdict{Kind: expr.VerdictReturn},
			}},
			{Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}}},
		}}},
	}
}

func macSpoofBase() chainSpec {
	return baseChain(spoofBaseChain, nftables.ChainTypeFilter, *nftables.ChainHookPrerouting, -300, []*nftables.Rule{{Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Lookup{SourceRegister: 1, SetName: spoofMap, IsDestRegSet: true, DestRegister: 0},
	}}})
}

// DeleteMacSpoofCheck removes the check of port, in one nftables
// transaction. A port without a check is not an error.
func (h *Handle) DeleteMacSpoofCheck(port string) error {
	if err := ifname.Check("delete mac spoof check", port); err != nil {
		return err
	}
	if err := h.deleteMacSpoofCheck(port); err != nil {
		return fmt.Errorf("delete mac spoof check on %q in %s: %w", port, h.where(), classify(err))
	}
	return nil
}

func (h *Handle) deleteMacSpoofCheck(port string) error {
	name := MacSpoofChain(port)
	t, exists, err := h.beginChain(unix.NFPROTO_BRIDGE, MasqTable, name)
	if err != nil || !exists {
		return err
	}
	c := t.conn()
	table, set := spoofObjects()
	ch := &nftables.Chain{Name: name, Table: table}
	del := func(elem bool) error {
		if elem {
			if err := c.SetDeleteElements(set, []nftables.SetElement{{Key: ifnameKey(port)}}); err != nil {
				return err
			}
		}
		c.FlushChain(ch)
		c.DelChain(ch)
		return t.commit()
	}
	err = del(true)
	if errors.Is(err, unix.ENOENT) {
		// The chain is there without its element (someone removed it).
		err = del(false)
	}
	if errors.Is(err, unix.ENOENT) {
		// Gone since the look (another DEL or GC of the port): done.
		err = nil
	}
	return err
}

// spoofObjects returns the table and map of the MAC spoofing check.
func spoofObjects() (*nftables.Table, *nftables.Set) {
	table := &nftables.Table{Name: MasqTable, Family: nftables.TableFamilyBridge}
	return table, &nftables.Set{Table: table, Name: spoofMap, IsMap: true, KeyType: nftables.TypeIFName, DataType: nftables.TypeVerdict}
}

// ifnameKey encodes an interface name as an nftables ifname key.
func ifnameKey(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}
