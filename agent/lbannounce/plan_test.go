//go:build !nokube

package lbannounce

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/cnibox/cnibox/agent/lbipam"
)

func TestPlan(t *testing.T) {
	lan := netip.MustParsePrefix("192.168.77.0/24")
	other := netip.MustParsePrefix("198.51.100.0/24")
	pool := func(name, first, last string, sel labels.Selector) lbipam.Announced {
		return lbipam.Announced{Name: name, Nodes: sel, Blocks: []lbipam.Block{{First: netip.MustParseAddr(first), Last: netip.MustParseAddr(last)}}}
	}
	lbNodes, _ := labels.Parse("lb=true")
	nodes := []Node{
		{Name: "n1", Labels: map[string]string{"lb": "true"}, Networks: []netip.Prefix{lan}},
		{Name: "n2", Labels: map[string]string{"lb": "true"}, Networks: []netip.Prefix{lan}},
		{Name: "n3", Labels: map[string]string{"lb": "false"}, Networks: []netip.Prefix{lan}},
		{Name: "n4", Labels: map[string]string{"lb": "true", "zone": "x"}, Networks: []netip.Prefix{other}},
		{Name: "n5", Labels: map[string]string{"lb": "true"}, Networks: []netip.Prefix{lan}, Leaving: true},
		{Name: "n6", Labels: map[string]string{"lb": "true"}}, // no agent
	}
	ip := netip.MustParseAddr
	tests := []struct {
		name     string
		pools    []lbipam.Announced
		services []Service
		want     []string // the candidates of 192.168.77.200, sorted ("" none)
		why      string   // a part of Why
	}{
		{name: "every selected node on the network",
			pools:    []lbipam.Announced{pool("p", "192.168.77.200", "192.168.77.210", lbNodes)},
			services: []Service{{Key: "default/a", IPs: []netip.Addr{ip("192.168.77.200")}}},
			want:     []string{"n1", "n2"}},
		{name: "no selector: every node on the network",
			pools:    []lbipam.Announced{pool("p", "192.168.77.200", "192.168.77.210", labels.Everything())},
			services: []Service{{Key: "default/a", IPs: []netip.Addr{ip("192.168.77.200")}}},
			want:     []string{"n1", "n2", "n3"}},
		{name: "Local: only nodes with a ready endpoint",
			pools:    []lbipam.Announced{pool("p", "192.168.77.200", "192.168.77.210", lbNodes)},
			services: []Service{{Key: "default/a", IPs: []netip.Addr{ip("192.168.77.200")}, Local: true, Ready: []string{"n2", "n3", "n4"}}},
			want:     []string{"n2"}},
		{name: "Local without a ready endpoint on an eligible node",
			pools:    []lbipam.Announced{pool("p", "192.168.77.200", "192.168.77.210", lbNodes)},
			services: []Service{{Key: "default/a", IPs: []netip.Addr{ip("192.168.77.200")}, Local: true, Ready: []string{"n3"}}},
			why:      "no node that may announce it runs a ready endpoint"},
		{name: "shared, both Local: nodes with an endpoint of each",
			pools: []lbipam.Announced{pool("p", "192.168.77.200", "192.168.77.210", labels.Everything())},
			services: []Service{{Key: "default/a", IPs: []netip.Addr{ip("192.168.77.200")}, Local: true, Ready: []string{"n1", "n2"}},
				{Key: "default/b", IPs: []netip.Addr{ip("192.168.77.200")}, Local: true, Ready: []string{"n2", "n3"}}},
			want: []string{"n2"}},
		{name: "shared with a Cluster Service: every eligible node",
			pools: []lbipam.Announced{pool("p", "192.168.77.200", "192.168.77.210", lbNodes)},
			services: []Service{{Key: "default/a", IPs: []netip.Addr{ip("192.168.77.200")}, Local: true, Ready: []string{"n1"}},
				{Key: "default/b", IPs: []netip.Addr{ip("192.168.77.200")}}},
			want: []string{"n1", "n2"}},
		{name: "in no pool",
			pools:    []lbipam.Announced{pool("p", "192.168.77.100", "192.168.77.110", lbNodes)},
			services: []Service{{Key: "default/a", IPs: []netip.Addr{ip("192.168.77.200")}}},
			why:      "in no LoadBalancerIPPool"},
		{name: "selector selects none",
			pools:    []lbipam.Announced{pool("p", "192.168.77.200", "192.168.77.210", labels.Nothing())},
			services: []Service{{Key: "default/a", IPs: []netip.Addr{ip("192.168.77.200")}}},
			why:      "selects no node"},
		{name: "no selected node on its network",
			pools:    []lbipam.Announced{pool("p", "192.168.77.200", "192.168.77.210", labels.SelectorFromSet(labels.Set{"zone": "x"}))},
			services: []Service{{Key: "default/a", IPs: []netip.Addr{ip("192.168.77.200")}}},
			why:      "has it in its uplink network"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := Make(Inputs{Self: "n1", Pools: tc.pools, Services: tc.services, Nodes: nodes})
			i := slices.IndexFunc(p.Addresses, func(a Address) bool { return a.IP == ip("192.168.77.200") })
			if i < 0 {
				t.Fatalf("no address 192.168.77.200 in %+v", p.Addresses)
			}
			a := p.Addresses[i]
			got := slices.Sorted(slices.Values(a.Candidates))
			if !slices.Equal(got, tc.want) {
				t.Errorf("candidates %v, want %v", got, tc.want)
			}
			if tc.why != "" && !strings.Contains(a.Why, tc.why) {
				t.Errorf("why %q, want it to say %q", a.Why, tc.why)
			}
			if tc.why == "" && a.Why != "" {
				t.Errorf("why %q, want none", a.Why)
			}
			_, announced := p.Candidates()[a.IP]
			if announced != (a.Pool != "") {
				t.Errorf("in the election: %v, want %v (pool %q)", announced, a.Pool != "", a.Pool)
			}
		})
	}
}

// TestPlanIPv6: an IPv6 address is announced by the nodes whose uplink
// has its network, as an IPv4 one.
func TestPlanIPv6(t *testing.T) {
	v6 := netip.MustParsePrefix("2001:db8:77::/64")
	nodes := []Node{
		{Name: "n1", Networks: []netip.Prefix{netip.MustParsePrefix("192.168.77.0/24"), v6}},
		{Name: "n2", Networks: []netip.Prefix{netip.MustParsePrefix("192.168.77.0/24")}}, // forwards IPv4 only
	}
	ip := netip.MustParseAddr("2001:db8:77::200")
	pools := []lbipam.Announced{{Name: "v6", Nodes: labels.Everything(), Blocks: []lbipam.Block{{First: ip, Last: netip.MustParseAddr("2001:db8:77::20f")}}}}
	p := Make(Inputs{Pools: pools, Services: []Service{{Key: "default/c", IPs: []netip.Addr{ip}}}, Nodes: nodes})
	if got := p.Candidates()[ip]; !slices.Equal(got, []string{"n1"}) {
		t.Errorf("candidates of %s: %v, want [n1]", ip, got)
	}
}

// TestPlanRankStable: the rank of the candidates of an address does not
// depend on the order of the nodes, and differs between addresses (so
// that several spread over the nodes).
func TestPlanRankStable(t *testing.T) {
	lan := netip.MustParsePrefix("192.168.77.0/24")
	var nodes []Node
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		nodes = append(nodes, Node{Name: n, Networks: []netip.Prefix{lan}})
	}
	pools := []lbipam.Announced{{Name: "p", Nodes: labels.Everything(), Blocks: []lbipam.Block{{First: netip.MustParseAddr("192.168.77.200"), Last: netip.MustParseAddr("192.168.77.250")}}}}
	var svcs []Service
	for i := range 20 {
		svcs = append(svcs, Service{Key: "default/s", IPs: []netip.Addr{netip.AddrFrom4([4]byte{192, 168, 77, byte(200 + i)})}})
	}
	a := Make(Inputs{Pools: pools, Services: svcs, Nodes: nodes})
	slices.Reverse(nodes)
	b := Make(Inputs{Pools: pools, Services: svcs, Nodes: nodes})
	first := map[string]bool{}
	for i := range a.Addresses {
		if !slices.Equal(a.Addresses[i].Candidates, b.Addresses[i].Candidates) {
			t.Errorf("%s: %v and %v in the other order of nodes", a.Addresses[i].IP, a.Addresses[i].Candidates, b.Addresses[i].Candidates)
		}
		first[a.Addresses[i].Candidates[0]] = true
	}
	if len(first) < 2 {
		t.Errorf("20 addresses all go first to %v", first)
	}
}
