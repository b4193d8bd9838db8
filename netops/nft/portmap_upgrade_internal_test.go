package nft

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// TestPortMapsRewriteOlderRules: a table an older cnibox made (its host IP
// rules DNAT to any destination, its sets without timeouts, no marker set)
// gets this cnibox's rules with the next ADD's elements, so an upgraded
// node is fixed without a reboot; its sets and their elements stay; the
// ADD after that takes the fast path and changes no rule.
func TestPortMapsRewriteOlderRules(t *testing.T) {
	t.Parallel()
	onKernels(t, "pmold", testPortMapsRewriteOlderRules)
}

func testPortMapsRewriteOlderRules(t *testing.T, h *Handle) {
	if _, err := h.nftConn(); err != nil {
		t.Fatal(err)
	}
	// The older table: the same chains, the host IP rules without `fib
	// daddr type local`, sets without the timeout flag (before removals
	// expired), no marker.
	older := portmapTable()
	for _, ss := range older.sets {
		ss.set.HasTimeout = false
	}
	older.chains[0].rules = []*nftables.Rule{
		{Exprs: slices.Concat(nfprotoIs(unix.NFPROTO_IPV4), []expr.Any{addrPayload(false, false, reg1), l4protoExpr(reg32at9),
			thDportExpr(reg32at10), pmLookup(pmSetHostIP4, reg1, true), dnatExpr(false)})},
		{Exprs: slices.Concat(nfprotoIs(unix.NFPROTO_IPV6), []expr.Any{addrPayload(true, false, reg1), l4protoExpr(reg2),
			thDportExpr(reg32at13), pmLookup(pmSetHostIP6, reg1, true), dnatExpr(true)})},
	}
	if older.chains[0].name != pmChainHostports {
		t.Fatalf("chain 0 of the spec is %s, want %s", older.chains[0].name, pmChainHostports)
	}
	if _, err := h.reconcile(older); err != nil {
		t.Fatal(err)
	}
	post := pmPostroutingMsgs()
	if err := h.commitRaw(post[:len(post)-1]...); err != nil { // all but the marker
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
	// The older sets stay, with the elements of both ADDs; removals
	// delete.
	got, err := h.PortMapEntries()
	if err != nil || len(got) != 1 || len(got[0].Mappings) != 2 {
		t.Errorf("PortMapEntries = %+v, %v; want one owner with 2 mappings", got, err)
	}
	set, err := h.nft.GetSetByName(&nftables.Table{Name: PortMapTable, Family: nftables.TableFamilyINet}, pmSetHostIP4)
	if err != nil || set.HasTimeout {
		t.Errorf("set %s after the ADDs: %+v, %v; want the older one, without timeouts", pmSetHostIP4, set, err)
	}
	if err := h.DeletePortMaps(PortMaps{Owner: "n c eth0", Mappings: []PortMapping{
		{Proto: ProtoTCP, HostIP: netip.MustParseAddr("192.0.2.1"), HostPort: 8080, PodIP: pod, PodPort: 80}}}); err != nil {
		t.Fatal(err)
	}
	if got, err := h.PortMapEntries(); err != nil || len(got) != 1 || len(got[0].Mappings) != 1 {
		t.Errorf("PortMapEntries after a DEL = %+v, %v; want the other mapping", got, err)
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
