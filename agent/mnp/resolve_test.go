package mnp

import (
	"net/netip"
	"slices"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops/nft"
)

// pod is a pod of namespace ns on node with labels, attached as net1 to
// the network "default/<net>" with address addr (and eth0's 10.244.x not
// in sight of any policy).
func pod(ns, name, node, net, addr string, labels map[string]string) *Pod {
	p := &Pod{Namespace: ns, Name: name, Node: node, Labels: labels,
		IPs: []netip.Addr{netip.MustParseAddr("10.244.0.9")}}
	if net != "" {
		p.Attachments = []Attachment{{Network: "default/" + net, Iface: "net1", IPs: []netip.Addr{netip.MustParseAddr(addr)}}}
	}
	return p
}

func ingressFrom(ns, name string, from map[string]string, nets ...string) *Policy {
	return &Policy{Networks: nets, NP: &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"name": "server"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
				PodSelector: &metav1.LabelSelector{MatchLabels: from},
			}}}},
		},
	}}
}

// allows reports whether one of d's rules has a clause whose peer set
// holds a (sets of the interface).
func allows(ifc nft.PodIface, d nft.PodDir, a string) bool {
	sets := map[policymodel.SetID]*policymodel.Set{}
	for _, s := range ifc.Sets {
		sets[s.ID] = s
	}
	for _, p := range d.Policies {
		for _, r := range p.Rules {
			for _, cl := range r.Clauses {
				if cl.Peer == "" || sets[cl.Peer].Contains(netip.MustParseAddr(a)) {
					return true
				}
			}
		}
	}
	return false
}

// TestResolve is the anchor's simple ingress case and what is around it: a
// policy for network m1 that lets client-a reach the server isolates the
// server's net1 on m1 only, takes its peers by their m1 addresses, and
// leaves the clients and the pods of other networks without a table.
func TestResolve(t *testing.T) {
	ns := []*policy.Namespace{{Name: "t", Labels: map[string]string{"kubernetes.io/metadata.name": "t"}}}
	in := Input{
		Node:       "n1",
		Namespaces: ns,
		Pods: []*Pod{
			pod("t", "server", "n1", "m1", "2.2.6.8", map[string]string{"name": "server"}),
			pod("t", "client-a", "n1", "m1", "2.2.6.9", map[string]string{"name": "client-a"}),
			pod("t", "client-b", "n1", "m1", "2.2.6.10", map[string]string{"name": "client-b"}),
			pod("t", "remote-a", "n2", "m1", "2.2.6.11", map[string]string{"name": "client-a"}),
			pod("t", "server-m2", "n1", "m2", "2.2.7.8", map[string]string{"name": "server"}),
			pod("t", "server-plain", "n1", "", "", map[string]string{"name": "server"}),
		},
		Policies: []*Policy{ingressFrom("t", "p1", map[string]string{"name": "client-a"}, "default/m1")},
	}
	got := Resolve(in)
	if len(got) != 1 || got["t/server"] == nil {
		t.Fatalf("tables for %v, want t/server's alone", keys(got))
	}
	ifs := got["t/server"].Ifaces
	if len(ifs) != 1 || ifs[0].Name != "net1" || !ifs[0].Ingress.Isolated || ifs[0].Egress.Isolated {
		t.Fatalf("server's interfaces %+v: want net1 isolated in ingress only", ifs)
	}
	for a, want := range map[string]bool{"2.2.6.9": true, "2.2.6.11": true, "2.2.6.10": false, "10.244.0.9": false, "2.2.7.8": false} {
		if allows(ifs[0], ifs[0].Ingress, a) != want {
			t.Errorf("ingress from %s allowed = %v, want %v", a, !want, want)
		}
	}
	if id := ifs[0].Ingress.Policies[0].ID; id != "mnp/t/p1" {
		t.Errorf("policy ID %q, want mnp/t/p1", id)
	}

	// The same policy for both networks: each pod isolated on its own,
	// with the peers of its own network.
	in.Policies = []*Policy{ingressFrom("t", "p1", map[string]string{"name": "client-a"}, "default/m1", "default/m2")}
	got = Resolve(in)
	if got["t/server-m2"] == nil || got["t/server"] == nil || len(got) != 2 {
		t.Fatalf("tables for %v, want t/server and t/server-m2", keys(got))
	}
	m2 := got["t/server-m2"].Ifaces[0]
	if allows(m2, m2.Ingress, "2.2.6.9") {
		t.Error("server-m2 allows client-a's m1 address: peers must be taken on the policy's network")
	}

	// A policy for another network isolates nothing here.
	in.Policies = []*Policy{ingressFrom("t", "p1", map[string]string{"name": "client-a"}, "default/other")}
	if got := Resolve(in); len(got) != 0 {
		t.Errorf("tables for %v with a policy for another network, want none", keys(got))
	}
}

// TestResolveTwoInterfaces: a pod on two networks, one policed, has a
// table for that interface only, and one attached twice to one network
// gets both interfaces.
func TestResolveTwoInterfaces(t *testing.T) {
	srv := pod("t", "server", "n1", "m1", "2.2.6.8", map[string]string{"name": "server"})
	srv.Attachments = append(srv.Attachments,
		Attachment{Network: "default/m2", Iface: "net2", IPs: []netip.Addr{netip.MustParseAddr("2.2.7.8")}},
		Attachment{Network: "default/m1", Iface: "net3", IPs: []netip.Addr{netip.MustParseAddr("2.2.6.18")}})
	got := Resolve(Input{Node: "n1", Pods: []*Pod{srv},
		Policies: []*Policy{ingressFrom("t", "deny", map[string]string{"name": "nobody"}, "default/m1")}})
	var names []string
	for _, i := range got["t/server"].Ifaces {
		names = append(names, i.Name)
		if allows(i, i.Ingress, "2.2.6.9") {
			t.Errorf("%s allows a pod the policy does not select", i.Name)
		}
	}
	if len(names) != 2 || names[0] != "net1" || names[1] != "net3" {
		t.Errorf("isolated interfaces %v, want [net1 net3]", names)
	}
}

func keys(m map[string]*nft.PodPolicy) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestPolicyFor(t *testing.T) {
	for _, c := range []struct {
		v    string
		want []string
		bad  bool
	}{
		{v: "default/macvlan1-simple", want: []string{"default/macvlan1-simple"}},
		{v: " a/x , y", want: []string{"a/x", "t/y"}},
		{v: "", bad: true},
		{v: "a/b/c", bad: true},
		{v: "a/x,,b/y", bad: true},
		{v: "/x", bad: true},
	} {
		got, err := PolicyFor("t", c.v)
		if (err != nil) != c.bad || (!c.bad && !slices.Equal(got, c.want)) {
			t.Errorf("PolicyFor(t, %q) = %v, %v; want %v (error: %v)", c.v, got, err, c.want, c.bad)
		}
	}
}

func TestParseNetworkStatus(t *testing.T) {
	got, err := ParseNetworkStatus(`[{"name":"cbr0","interface":"eth0","ips":["10.244.0.5"],"default":true},
		{"name":"default/m1","interface":"net1","ips":["2.2.6.8","2001::8","bad"],"mac":"0a:00:00:00:00:01"},
		{"name":"default/nodev","ips":["2.2.6.9"]}]`)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Network != "default/m1" || got[0].Iface != "net1" || len(got[0].IPs) != 2 {
		t.Errorf("got %+v, want net1 on default/m1 with two addresses", got)
	}
	if _, err := ParseNetworkStatus(`{"name":"x"}`); err == nil {
		t.Error("an object for a list: no error")
	}
}

// TestPolicyTypesAsTheAnchor: a policy with egress rules alone isolates
// its pods in egress only (the anchor's simple-v4-egress case: clients
// still reach the server), one with ingress rules alone in ingress only,
// both with both, given policyTypes win, and one with neither isolates
// nothing.
func TestPolicyTypesAsTheAnchor(t *testing.T) {
	in := []networkingv1.NetworkPolicyIngressRule{{}}
	eg := []networkingv1.NetworkPolicyEgressRule{{}}
	ing, egr := networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress
	for _, c := range []struct {
		name string
		spec networkingv1.NetworkPolicySpec
		want []networkingv1.PolicyType
		ok   bool
	}{
		{"egress rules alone", networkingv1.NetworkPolicySpec{Egress: eg}, []networkingv1.PolicyType{egr}, true},
		{"ingress rules alone", networkingv1.NetworkPolicySpec{Ingress: in}, []networkingv1.PolicyType{ing}, true},
		{"both", networkingv1.NetworkPolicySpec{Ingress: in, Egress: eg}, []networkingv1.PolicyType{ing, egr}, true},
		{"given", networkingv1.NetworkPolicySpec{Egress: eg, PolicyTypes: []networkingv1.PolicyType{ing}}, []networkingv1.PolicyType{ing}, true},
		{"neither", networkingv1.NetworkPolicySpec{}, nil, false},
	} {
		ok := PolicyTypesAsTheAnchor(&c.spec)
		if ok != c.ok || !slices.Equal(c.spec.PolicyTypes, c.want) {
			t.Errorf("%s: %v %v, want %v %v", c.name, c.spec.PolicyTypes, ok, c.want, c.ok)
		}
	}
	// Resolved: the server of an egress-only policy is open to clients.
	spec := networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"name": "server"}},
		Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"name": "client-a"}}}}}}}
	PolicyTypesAsTheAnchor(&spec)
	got := Resolve(Input{Node: "n1", Pods: []*Pod{pod("t", "server", "n1", "m1", "2.2.6.8", map[string]string{"name": "server"})},
		Policies: []*Policy{{Networks: []string{"default/m1"}, NP: &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "eg"}, Spec: spec}}}})
	ifs := got["t/server"].Ifaces
	if len(ifs) != 1 || ifs[0].Ingress.Isolated || !ifs[0].Egress.Isolated {
		t.Errorf("an egress-only policy: %+v, want net1 isolated in egress only", ifs)
	}
}
