package policynft_test

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/agent/policynft"
	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops/nft"
)

// node is an Engine and a Sink on a lab's node, fed as the watcher feeds
// them.
type node struct {
	t    testing.TB
	e    *policy.Engine
	sink *policynft.Syncer
}

func newNode(t testing.TB, l *lab) *node {
	n := &node{t: t, e: policy.NewEngine("n1")}
	var err error
	n.sink, err = policynft.New(l.nodePath)
	must(t, err)
	t.Cleanup(func() { n.sink.Close() })
	n.e.SetNodeAddrs([]netip.Addr{nodeAddr, nodeAddr6})
	for _, ns := range []string{"x", "y"} {
		n.e.SetNamespace(&policy.Namespace{Name: ns, Labels: map[string]string{"ns": ns}})
	}
	for _, p := range l.pods {
		n.e.SetPod(p.apiPod(nil))
	}
	return n
}

// start hands the whole model to the sink, as the watcher does once synced.
func (n *node) start() {
	m := n.e.Model()
	d := policymodel.Delta{Rules: true}
	for id := range m.Sets {
		d.AddSets = append(d.AddSets, id)
	}
	must(n.t, n.sink.Apply(m, d))
}

// do applies one change and hands its delta to the sink.
func (n *node) do(change func(*policy.Engine) policymodel.Delta) {
	n.t.Helper()
	if d := change(n.e); !d.Empty() {
		must(n.t, n.sink.Apply(n.e.Model(), d))
	}
}

var (
	ingress = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	egress  = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	tcp     = corev1.ProtocolTCP
	udp     = corev1.ProtocolUDP
	sctp    = corev1.ProtocolSCTP
)

func cnp(name string, tier cnpv1.Tier, prio int32, subjectNS string, in []cnpv1.ClusterNetworkPolicyIngressRule) *cnpv1.ClusterNetworkPolicy {
	c := &cnpv1.ClusterNetworkPolicy{Spec: cnpv1.ClusterNetworkPolicySpec{
		Tier: tier, Priority: prio,
		Subject: cnpv1.ClusterNetworkPolicySubject{Namespaces: sel("ns", subjectNS)},
		Ingress: in,
	}}
	c.Name = name
	return c
}

func fromNS(action cnpv1.ClusterNetworkPolicyRuleAction, ns string, protos ...cnpv1.ClusterNetworkPolicyProtocol) cnpv1.ClusterNetworkPolicyIngressRule {
	return cnpv1.ClusterNetworkPolicyIngressRule{Action: action, From: []cnpv1.ClusterNetworkPolicyIngressPeer{{Namespaces: sel("ns", ns)}}, Protocols: protos}
}

func tcpPort(n int32) cnpv1.ClusterNetworkPolicyProtocol {
	return cnpv1.ClusterNetworkPolicyProtocol{TCP: &cnpv1.ClusterNetworkPolicyProtocolTCP{DestinationPort: &cnpv1.Port{Number: n}}}
}

func sctpPort(n int32) cnpv1.ClusterNetworkPolicyProtocol {
	return cnpv1.ClusterNetworkPolicyProtocol{SCTP: &cnpv1.ClusterNetworkPolicyProtocolSCTP{DestinationPort: &cnpv1.Port{Number: n}}}
}

// TestPolicyTraffic: for a table of policies, real TCP, UDP and (where the
// kernel has SCTP sockets: make test-kernel) SCTP between pods on one
// bridge pass exactly when Model.Evaluate says so.
func TestPolicyTraffic(t *testing.T) {
	t.Parallel()
	l := newLab(t, "x/a", "x/b", "y/a", "y/b")
	n := newNode(t, l)
	n.start()
	cases := []struct {
		name string
		nps  []*networkingv1.NetworkPolicy
		cnps []*cnpv1.ClusterNetworkPolicy
	}{
		{name: "no policy"},
		{name: "deny all ingress in x", nps: []*networkingv1.NetworkPolicy{
			np("x", "deny", networkingv1.NetworkPolicySpec{PolicyTypes: ingress})}},
		{name: "x/a from app=b of x on TCP 80", nps: []*networkingv1.NetworkPolicy{
			np("x", "web", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "a"), Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: sel("app", "b")}},
				Ports: []networkingv1.NetworkPolicyPort{port(tcp, 80)},
			}}})}},
		{name: "y/a egress to ns x on UDP 80 and TCP 81", nps: []*networkingv1.NetworkPolicy{
			np("y", "out", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "a"), PolicyTypes: egress, Egress: []networkingv1.NetworkPolicyEgressRule{{
				To:    []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "x")}},
				Ports: []networkingv1.NetworkPolicyPort{port(udp, 80), port(tcp, 81)},
			}}})}},
		{name: "ipBlock with except, port range", nps: []*networkingv1.NetworkPolicy{
			np("x", "block", networkingv1.NetworkPolicySpec{PolicyTypes: ingress, Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.99.0.0/24", Except: []string{"10.99.0.4/32"}}}},
				Ports: []networkingv1.NetworkPolicyPort{port(tcp, 80, 81)},
			}}})}},
		{name: "named port", nps: []*networkingv1.NetworkPolicy{
			np("y", "named", networkingv1.NetworkPolicySpec{PolicyTypes: ingress, Ingress: []networkingv1.NetworkPolicyIngressRule{{
				Ports: []networkingv1.NetworkPolicyPort{port(tcp, "web")},
			}}})}},
		{name: "x/a takes SCTP 80 only", nps: []*networkingv1.NetworkPolicy{
			np("x", "sctp", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "a"), Ingress: []networkingv1.NetworkPolicyIngressRule{{
				Ports: []networkingv1.NetworkPolicyPort{port(sctp, 80)},
			}}})}},
		{name: "x takes TCP 80 only: SCTP 80 is not TCP 80", nps: []*networkingv1.NetworkPolicy{
			np("x", "tcp", networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{
				Ports: []networkingv1.NetworkPolicyPort{port(tcp, 80)},
			}}})}},
		{name: "y/a egress to ns x on SCTP 80-81", nps: []*networkingv1.NetworkPolicy{
			np("y", "out", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "a"), PolicyTypes: egress, Egress: []networkingv1.NetworkPolicyEgressRule{{
				To:    []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "x")}},
				Ports: []networkingv1.NetworkPolicyPort{port(sctp, 80, 81)},
			}}})}},
		{name: "admin deny y to x on 81, baseline deny x/b", cnps: []*cnpv1.ClusterNetworkPolicy{
			cnp("deny81", cnpv1.AdminTier, 10, "x", []cnpv1.ClusterNetworkPolicyIngressRule{fromNS(cnpv1.ClusterNetworkPolicyRuleActionDeny, "y", tcpPort(81))}),
			cnp("base", cnpv1.BaselineTier, 10, "x", []cnpv1.ClusterNetworkPolicyIngressRule{fromNS(cnpv1.ClusterNetworkPolicyRuleActionDeny, "y")}),
		}},
		{name: "admin pass to the NetworkPolicy, accept over it", nps: []*networkingv1.NetworkPolicy{
			np("x", "deny", networkingv1.NetworkPolicySpec{PolicyTypes: ingress})},
			cnps: []*cnpv1.ClusterNetworkPolicy{
				cnp("pass", cnpv1.AdminTier, 1, "x", []cnpv1.ClusterNetworkPolicyIngressRule{fromNS(cnpv1.ClusterNetworkPolicyRuleActionPass, "y", tcpPort(80))}),
				cnp("acc", cnpv1.AdminTier, 2, "x", []cnpv1.ClusterNetworkPolicyIngressRule{fromNS(cnpv1.ClusterNetworkPolicyRuleActionAccept, "y")}),
			}},
		{name: "admin deny y to x on SCTP 80, accept y to x on TCP 80", nps: []*networkingv1.NetworkPolicy{
			np("x", "deny", networkingv1.NetworkPolicySpec{PolicyTypes: ingress})},
			cnps: []*cnpv1.ClusterNetworkPolicy{
				cnp("denysctp", cnpv1.AdminTier, 1, "x", []cnpv1.ClusterNetworkPolicyIngressRule{fromNS(cnpv1.ClusterNetworkPolicyRuleActionDeny, "y", sctpPort(80))}),
				cnp("acctcp", cnpv1.AdminTier, 2, "x", []cnpv1.ClusterNetworkPolicyIngressRule{fromNS(cnpv1.ClusterNetworkPolicyRuleActionAccept, "y", tcpPort(80))}),
			}},
		{name: "baseline deny y to x on SCTP 80", cnps: []*cnpv1.ClusterNetworkPolicy{
			cnp("basesctp", cnpv1.BaselineTier, 10, "x", []cnpv1.ClusterNetworkPolicyIngressRule{fromNS(cnpv1.ClusterNetworkPolicyRuleActionDeny, "y", sctpPort(80))}),
		}},
	}
	var prevNP []*networkingv1.NetworkPolicy
	var prevCNP []*cnpv1.ClusterNetworkPolicy
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n.t = t
			for _, p := range prevNP {
				n.do(func(e *policy.Engine) policymodel.Delta { return e.DeleteNetworkPolicy(p.Namespace, p.Name) })
			}
			for _, p := range prevCNP {
				n.do(func(e *policy.Engine) policymodel.Delta { return e.DeleteClusterNetworkPolicy(p.Name) })
			}
			for _, p := range c.nps {
				n.do(func(e *policy.Engine) policymodel.Delta { return e.SetNetworkPolicy(p) })
			}
			for _, p := range c.cnps {
				n.do(func(e *policy.Engine) policymodel.Delta { return e.SetClusterNetworkPolicy(p) })
			}
			prevNP, prevCNP = c.nps, c.cnps
			l.checkTraffic(t, n.e.Model())
		})
	}
}

// TestPolicyDeltaElementsOnly: a pod's arrival, departure and label change
// change set elements only (every rule keeps its handle), and the traffic
// follows; but the change that takes a policy's last subject off the node
// takes the policy out of the node's table.
func TestPolicyDeltaElementsOnly(t *testing.T) {
	t.Parallel()
	l := newLab(t, "x/a", "x/b", "y/a")
	n := newNode(t, l)
	n.do(func(e *policy.Engine) policymodel.Delta {
		return e.SetNetworkPolicy(np("x", "web", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "a"), Ingress: []networkingv1.NetworkPolicyIngressRule{{
			From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("role", "client")}},
		}}}))
	})
	n.start()
	handles := l.ruleHandles(t)
	before := handles(t)
	l.checkTraffic(t, n.e.Model())
	xb, xa := l.pod("x/b"), l.pod("x/a")
	steps := []struct {
		name   string
		change func(*policy.Engine) policymodel.Delta
		reach  bool // x/b reaches x/a on TCP 80
		rules  bool // the policy leaves the node's table
	}{
		{"x/b labelled role=client", func(e *policy.Engine) policymodel.Delta {
			return e.SetPod(xb.apiPod(map[string]string{"app": "b", "role": "client"}))
		}, true, false},
		{"x/b gone", func(e *policy.Engine) policymodel.Delta { return e.DeletePod("x", "b") }, false, false},
		{"x/b back without the label", func(e *policy.Engine) policymodel.Delta { return e.SetPod(xb.apiPod(nil)) }, false, false},
		{"x/a relabelled: no longer selected", func(e *policy.Engine) policymodel.Delta {
			return e.SetPod(xa.apiPod(map[string]string{"app": "other"}))
		}, true, true},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			n.t = t
			d := s.change(n.e)
			if d.Rules != s.rules {
				t.Fatalf("delta changes the rules: %v, want %v: %+v", d.Rules, s.rules, d)
			}
			must(t, n.sink.Apply(n.e.Model(), d))
			after := handles(t)
			if !s.rules && !slices.Equal(before, after) {
				t.Errorf("rule handles changed:\nbefore %v\nafter  %v", before, after)
			}
			if n.e.Model().Ingress.NetworkPolicy != nil && s.rules {
				t.Errorf("the policy of no pod of the node is still in its model: %v", n.e.Model().Ingress.NetworkPolicy)
			}
			if got := connect(t, xb, xa.ip, policymodel.TCP, 80, waitFor(s.reach)); got != s.reach {
				t.Errorf("x/b -> x/a: connected %v, want %v", got, s.reach)
			}
			l.checkTraffic(t, n.e.Model())
		})
	}
}

// web is x/web: the pods app=a of namespace x take TCP port p from anyone.
func web(p int) *networkingv1.NetworkPolicy {
	return np("x", "web", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "a"), Ingress: []networkingv1.NetworkPolicyIngressRule{{
		Ports: []networkingv1.NetworkPolicyPort{port(tcp, p)}}}})
}

// TestPolicyChangeRewritesItsChains: a policy's change rewrites its own
// chains; another policy's keep their rule handles, and traffic follows.
func TestPolicyChangeRewritesItsChains(t *testing.T) {
	t.Parallel()
	l := newLab(t, "x/a", "x/b", "y/a")
	n := newNode(t, l)
	db := np("x", "db", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "b"), Ingress: []networkingv1.NetworkPolicyIngressRule{{
		From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "y")}}}}})
	n.e.SetNetworkPolicy(web(80))
	n.e.SetNetworkPolicy(db)
	n.start()
	h, err := nft.Open(l.nodePath)
	must(t, err)
	defer h.Close()
	of := func(chain string) []string {
		all, err := h.PolicyRuleHandles()
		must(t, err)
		var out []string
		for _, r := range all {
			if strings.HasPrefix(r, chain+":") {
				out = append(out, r)
			}
		}
		return out
	}
	dbChain, webChain := "n-"+policymodel.ChainID("np/x/db")+"-in4", "n-"+policymodel.ChainID("np/x/web")+"-in4"
	dbBefore, webBefore := of(dbChain), of(webChain)
	if len(dbBefore) == 0 || len(webBefore) == 0 {
		t.Fatalf("no rules in %s (%v) or %s (%v)", dbChain, dbBefore, webChain, webBefore)
	}
	n.do(func(e *policy.Engine) policymodel.Delta { return e.SetNetworkPolicy(web(81)) })
	if got := of(dbChain); !slices.Equal(got, dbBefore) {
		t.Errorf("np/x/db's rules rewritten: %v, before %v", got, dbBefore)
	}
	if got := of(webChain); slices.Equal(got, webBefore) {
		t.Errorf("np/x/web's rules not rewritten: %v", got)
	}
	l.checkTraffic(t, n.e.Model())
}

// TestPolicyAddRewritesLittle: a NetworkPolicy's arrival on a node with 40
// others rewrites the jumps of its bucket, not one per policy of the node.
func TestPolicyAddRewritesLittle(t *testing.T) {
	t.Parallel()
	l := newLab(t, "x/a", "y/a")
	n := newNode(t, l)
	_, _, gone := addRewrites(t, n, l.ruleHandles(t))
	// Its bucket's jumps (about 40/32 policies a bucket, both families),
	// and the tier's jump to the bucket if it was empty.
	if len(gone) > 12 {
		t.Errorf("a policy's arrival rewrote %d rules of the others: %v", len(gone), gone)
	}
	l.checkTraffic(t, n.e.Model())
}

// addRewrites sets 40 NetworkPolicies of x's pods on n, starts it, adds a
// 41st and returns the policy table's rule handles (read with handles)
// before and after, and those of before that went.
func addRewrites(t *testing.T, n *node, handles func(*testing.T) []string) (before, after, gone []string) {
	pol := func(i int) *networkingv1.NetworkPolicy {
		return np("x", fmt.Sprintf("p%d", i), networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "a"), Ingress: []networkingv1.NetworkPolicyIngressRule{{
			Ports: []networkingv1.NetworkPolicyPort{port(tcp, 1000+i)}}}})
	}
	for i := range 40 {
		n.e.SetNetworkPolicy(pol(i))
	}
	n.start()
	before = handles(t)
	n.do(func(e *policy.Engine) policymodel.Delta { return e.SetNetworkPolicy(pol(40)) })
	after = handles(t)
	for _, r := range before {
		if !slices.Contains(after, r) {
			gone = append(gone, r)
		}
	}
	return before, after, gone
}

// ruleHandles returns a reader of the node's policy rule handles
// (nft.PolicyRuleHandles) for the test or subtest it is given, its
// connection closed at t's end.
func (l *lab) ruleHandles(t *testing.T) func(*testing.T) []string {
	h, err := nft.Open(l.nodePath)
	must(t, err)
	t.Cleanup(func() { h.Close() })
	return func(t *testing.T) []string {
		t.Helper()
		hs, err := h.PolicyRuleHandles()
		must(t, err)
		return hs
	}
}

// TestPolicyTableGoneUnderIt: the agent's Handle remembers the table's
// chains, sets and counters between its transactions instead of reading
// them each time; when someone else removes the table (an operator's `nft
// flush ruleset`), the next change fails on what it remembered and the
// Sink's full sync puts the whole table back, traffic as the model says.
func TestPolicyTableGoneUnderIt(t *testing.T) {
	t.Parallel()
	l := newLab(t, "x/a", "x/b", "y/a")
	n := newNode(t, l)
	n.e.SetNetworkPolicy(web(80))
	n.start()
	n.do(func(e *policy.Engine) policymodel.Delta { return e.SetNetworkPolicy(web(81)) }) // the Handle now knows the table
	xb, xa := l.pod("x/b"), l.pod("x/a")
	other, err := nft.Open(l.nodePath)
	must(t, err)
	defer other.Close()
	must(t, other.DeletePolicy())
	n.do(func(e *policy.Engine) policymodel.Delta { return e.SetNetworkPolicy(web(80)) })
	sets, err := other.PolicySets()
	must(t, err)
	if len(sets) == 0 {
		t.Fatal("no policy sets after the change: the table was not put back")
	}
	l.checkTraffic(t, n.e.Model())
	if !connect(t, xb, xa.ip, policymodel.TCP, 80, allowWait) || connect(t, xb, xa.ip, policymodel.TCP, 81, denyWait) {
		t.Error("x/b -> x/a: want TCP 80 open and 81 closed after the change")
	}
}
