package egress

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func sel(t *testing.T, kv ...string) labels.Selector {
	t.Helper()
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	s, err := metav1.LabelSelectorAsSelector(&metav1.LabelSelector{MatchLabels: m})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// TestMake: which pods leave from which address, which node may hold
// which, the ranks and the conditions.
func TestMake(t *testing.T) {
	lan := []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
	in := Inputs{
		Self: "n1",
		Gateways: []Gateway{
			{Name: "prod", PodSelector: labels.Everything(), NamespaceSelector: sel(t, "team", "prod"), NodeSelector: sel(t, "egress", "yes"),
				IPs: addrs("192.0.2.10", "192.0.2.11")},
			{Name: "db", PodSelector: sel(t, "app", "db"), NamespaceSelector: labels.Everything(), NodeSelector: labels.Everything(),
				IPs: addrs("192.0.2.20"), Destinations: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}},
			{Name: "nowhere", PodSelector: sel(t, "app", "x"), NamespaceSelector: labels.Everything(), NodeSelector: sel(t, "egress", "yes"),
				IPs: addrs("203.0.113.1")},
		},
		Pods: []Pod{
			{Namespace: "p", Name: "web-1", Node: "n1", IPs: addrs("10.244.1.5")},
			{Namespace: "p", Name: "web-2", Node: "n2", IPs: addrs("10.244.2.5")},
			{Namespace: "p", Name: "db-1", Node: "n1", Labels: map[string]string{"app": "db"}, IPs: addrs("10.244.1.6")}, // prod wins: "db" < "prod", so db
			{Namespace: "q", Name: "db-2", Node: "n1", Labels: map[string]string{"app": "db"}, IPs: addrs("10.244.1.7")},
			{Namespace: "q", Name: "other", Node: "n1", IPs: addrs("10.244.1.8")},
		},
		Namespaces: map[string]map[string]string{"p": {"team": "prod"}, "q": {}},
		Nodes: map[string]Node{
			"n1": {Name: "n1", Labels: map[string]string{"egress": "yes"}, Networks: lan},
			"n2": {Name: "n2", Labels: map[string]string{"egress": "yes"}, Networks: lan},
			"n3": {Name: "n3", Networks: lan},
		},
		Holders: map[netip.Addr]string{netip.MustParseAddr("192.0.2.10"): "n2", netip.MustParseAddr("192.0.2.20"): "n3"},
	}
	p := Make(in)
	byKey := map[string]Use{}
	for _, u := range p.Uses {
		byKey[u.Gateway+"/"+u.IP.String()] = u
	}
	// prod: only .10 is held: both prod pods leave from it; db-1 is
	// selected by both gateways and db, first by name, wins.
	if u := byKey["prod/192.0.2.10"]; !slices.Equal(u.Pods, addrs("10.244.1.5", "10.244.2.5")) || !slices.Equal(u.Local, addrs("10.244.1.5")) || u.Holder != "n2" {
		t.Errorf("prod/192.0.2.10 = %+v; want web-1 and web-2, web-1 local, held by n2", u)
	}
	if u := byKey["prod/192.0.2.11"]; len(u.Pods) != 0 {
		t.Errorf("prod/192.0.2.11 (not held) has pods %v", u.Pods)
	}
	if u := byKey["db/192.0.2.20"]; !slices.Equal(u.Pods, addrs("10.244.1.6", "10.244.1.7")) || !slices.Equal(u.LocalPods, []string{"p/db-1", "q/db-2"}) || len(u.Destinations) != 1 {
		t.Errorf("db/192.0.2.20 = %+v; want db-1 and db-2 (local), its destinations", u)
	}
	// n1 may hold prod's (labelled) and db's (any node), not nowhere's.
	for _, ip := range []string{"192.0.2.10", "192.0.2.11", "192.0.2.20"} {
		if _, ok := p.Eligible[netip.MustParseAddr(ip)]; !ok {
			t.Errorf("n1 not eligible for %s", ip)
		}
	}
	if _, ok := p.Eligible[netip.MustParseAddr("203.0.113.1")]; ok {
		t.Errorf("n1 eligible for 203.0.113.1, outside its network")
	}
	if !p.Reporter {
		t.Errorf("n1, first by name, is not the reporter")
	}
	if c := p.Conditions["nowhere"]; c.Ready || c.Reason != "NoEligibleNode" || !strings.Contains(c.Message, "spec.egressIPs[0] 203.0.113.1") {
		t.Errorf("nowhere's condition = %+v; want NoEligibleNode naming spec.egressIPs[0]", c)
	}
	if c := p.Conditions["prod"]; c.Ready || c.Reason != "NotHeld" || !strings.Contains(c.Message, "192.0.2.10 on node n2") {
		t.Errorf("prod's condition = %+v; want NotHeld, naming .10's holder", c)
	}
	if c := p.Conditions["db"]; !c.Ready {
		t.Errorf("db's condition = %+v; want ready", c)
	}
	// The ranks of the three nodes for an address are a permutation, the
	// same on every node.
	ranks := map[int]string{}
	for _, self := range []string{"n1", "n2", "n3"} {
		in.Self = self
		r, ok := Make(in).Eligible[netip.MustParseAddr("192.0.2.20")]
		if !ok {
			t.Fatalf("%s not eligible for db's address", self)
		}
		if other, dup := ranks[r]; dup {
			t.Errorf("%s and %s share rank %d", self, other, r)
		}
		ranks[r] = self
	}
}

// TestRendezvousSpread: many pods over two held addresses use both, and
// losing one moves only its own pods.
func TestRendezvousSpread(t *testing.T) {
	two := addrs("192.0.2.10", "192.0.2.11")
	one := addrs("192.0.2.10")
	n := map[netip.Addr]int{}
	for i := range 200 {
		key := netip.AddrFrom4([4]byte{10, 244, byte(i / 250), byte(i % 250)}).String()
		a := rendezvous(two, key)
		n[a]++
		if a == one[0] && rendezvous(one, key) != a {
			t.Fatalf("a pod of the kept address moved")
		}
	}
	if n[two[0]] < 60 || n[two[1]] < 60 {
		t.Errorf("200 pods over two addresses: %v; want both used", n)
	}
}

// TestMakeDualStack: a gateway with an IPv4 and an IPv6 address sends a
// dual-stack pod's IPv4 address out by the IPv4 one and its IPv6 address
// by the IPv6 one, each use with the destinations of its family; an
// IPv6-only node network holds only the IPv6 address; a family without a
// held address leaves that family of the pod out.
func TestMakeDualStack(t *testing.T) {
	v4, v6 := netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("2001:db8:e6::/64")
	dst4, dst6 := netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("2001:db8:100::/48")
	in := Inputs{
		Self: "n1",
		Gateways: []Gateway{{Name: "prod", PodSelector: labels.Everything(), NamespaceSelector: labels.Everything(), NodeSelector: labels.Everything(),
			IPs: addrs("192.0.2.10", "2001:db8:e6::10"), Destinations: []netip.Prefix{dst4, dst6}}},
		Pods: []Pod{
			{Namespace: "p", Name: "web-1", Node: "n1", IPs: addrs("10.244.1.5", "fd00:244:0:1::5")},
			{Namespace: "p", Name: "web-2", Node: "n2", IPs: addrs("fd00:244:0:2::5")},
		},
		Namespaces: map[string]map[string]string{"p": {}},
		Nodes: map[string]Node{
			"n1": {Name: "n1", Networks: []netip.Prefix{v4, v6}},
			"n2": {Name: "n2", Networks: []netip.Prefix{v6}},
		},
		Holders: map[netip.Addr]string{netip.MustParseAddr("192.0.2.10"): "n1", netip.MustParseAddr("2001:db8:e6::10"): "n2"},
	}
	p := Make(in)
	want := map[string]Use{
		"192.0.2.10": {Gateway: "prod", IP: netip.MustParseAddr("192.0.2.10"), Holder: "n1", Destinations: []netip.Prefix{dst4},
			Pods: addrs("10.244.1.5"), Local: addrs("10.244.1.5"), LocalPods: []string{"p/web-1"}},
		"2001:db8:e6::10": {Gateway: "prod", IP: netip.MustParseAddr("2001:db8:e6::10"), Holder: "n2", Destinations: []netip.Prefix{dst6},
			Pods: addrs("fd00:244:0:1::5", "fd00:244:0:2::5"), Local: addrs("fd00:244:0:1::5"), LocalPods: []string{"p/web-1"}},
	}
	for _, u := range p.Uses {
		w := want[u.IP.String()]
		if u.Holder != w.Holder || !slices.Equal(u.Destinations, w.Destinations) || !slices.Equal(u.Pods, w.Pods) ||
			!slices.Equal(u.Local, w.Local) || !slices.Equal(u.LocalPods, w.LocalPods) {
			t.Errorf("use of %s = %+v, want %+v", u.IP, u, w)
		}
	}
	if c := p.Candidates[netip.MustParseAddr("192.0.2.10")]; !slices.Equal(c, []string{"n1"}) {
		t.Errorf("candidates of the IPv4 address = %v, want [n1] (n2 has no IPv4 network)", c)
	}
	if c := p.Candidates[netip.MustParseAddr("2001:db8:e6::10")]; len(c) != 2 {
		t.Errorf("candidates of the IPv6 address = %v, want n1 and n2", c)
	}
	delete(in.Holders, netip.MustParseAddr("2001:db8:e6::10"))
	for _, u := range Make(in).Uses {
		if u.IP.Is6() && len(u.Pods) != 0 {
			t.Errorf("an IPv6 address without a holder has pods %v", u.Pods)
		}
		if u.IP.Is4() && !slices.Equal(u.Pods, addrs("10.244.1.5")) {
			t.Errorf("the IPv4 address's pods = %v, want only the IPv4 one, its IPv6 family leaving as without a gateway", u.Pods)
		}
	}
}
