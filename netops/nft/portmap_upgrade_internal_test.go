package nft

import (
	"net/netip"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	mdnetlink "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// TestPortMapsRewriteOlderRules: a table an older cnibox made (its host IP
// rules DNAT to any destination, no marker set) gets this cnibox's rules
// with the next ADD's elements, so an upgraded node is fixed without a
// reboot; the ADD after that takes the fast path and changes no rule.
func TestPortMapsRewriteOlderRules(t *testing.T) {
	onKernels(t, "pmold", testPortMapsRewriteOlderRules)
}

func testPortMapsRewriteOlderRules(t *testing.T, h *Handle) {
	if _, err := h.nftConn(); err != nil {
		t.Fatal(err)
	}
	// The older table: the same sets and chains, the host IP rules without
	// `fib daddr type local`, no marker.
	older := [][][]byte{
		join(nfproto(unix.NFPROTO_IPV4), [][]byte{ipField(false, false), l4proto(reg32at9), thDport(reg32at10),
			lookup(pmSetHostIP4, reg1, true), dnat(false)}),
		join(nfproto(unix.NFPROTO_IPV6), [][]byte{ipField(true, false), l4proto(reg2), thDport(reg32at13),
			lookup(pmSetHostIP6, reg1, true), dnat(true)}),
	}
	msgs := append(pmSchemaMsgs(),
		pmMsg(unix.NFT_MSG_DELSET, mdnetlink.Acknowledge, attrs(
			mdnetlink.Attribute{Type: unix.NFTA_SET_TABLE, Data: cstr(PortMapTable)},
			mdnetlink.Attribute{Type: unix.NFTA_SET_NAME, Data: cstr(pmSetRules)})),
		pmMsg(unix.NFT_MSG_DELRULE, mdnetlink.Acknowledge, attrs(
			mdnetlink.Attribute{Type: unix.NFTA_RULE_TABLE, Data: cstr(PortMapTable)},
			mdnetlink.Attribute{Type: unix.NFTA_RULE_CHAIN, Data: cstr(pmChainHostports)})),
		pmRuleMsg(pmChainHostports, older[0]), pmRuleMsg(pmChainHostports, older[1]))
	if err := h.commitRaw(msgs...); err != nil {
		t.Fatal(err)
	}
	if n := fibRules(t, h); n != 0 {
		t.Fatalf("the older table has %d rules with fib, want 0", n)
	}

	pod := netip.MustParseAddr("10.1.0.2")
	for i, port := range []uint16{8080, 8081} {
		_, err := h.EnsurePortMaps(PortMaps{Owner: "n c eth0", Mappings: []PortMapping{
			{Proto: ProtoTCP, HostIP: netip.MustParseAddr("192.0.2.1"), HostPort: port, PodIP: pod, PodPort: 80}}})
		if err != nil {
			t.Fatal(err)
		}
		if n := fibRules(t, h); n != 4 {
			t.Errorf("ADD %d: %d of the hostports rules check fib daddr type local, want all 4", i+1, n)
		}
	}
	if _, err := h.nft.GetSetByName(&nftables.Table{Name: PortMapTable, Family: nftables.TableFamilyINet}, pmSetRules); err != nil {
		t.Errorf("marker set %s: %v", pmSetRules, err)
	}
}

// fibRules counts the rules of the hostports chain with a fib expression.
func fibRules(t *testing.T, h *Handle) int {
	t.Helper()
	rules, err := h.nft.GetRules(&nftables.Table{Name: PortMapTable, Family: nftables.TableFamilyINet}, &nftables.Chain{Name: pmChainHostports})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range rules {
		for _, e := range r.Exprs {
			if _, ok := e.(*expr.Fib); ok {
				n++
				break
			}
		}
	}
	return n
}
