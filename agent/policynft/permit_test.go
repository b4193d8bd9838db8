//go:build !nokube

package policynft_test

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/agent/policynft"
	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops/nstest"
)

// TestPermitOutsideLock: while the DNS proxy's Permit evaluates a pod's
// egress rules (a hook blocks it, as a large policy's evaluation takes
// seconds), another namespace's change goes through the watcher's lock
// and its transaction is committed; Permit answers once the evaluation
// ends, and the pod's next queries to that server cost one evaluation
// per model, the cache answering the rest. Before, Permit evaluated with
// the watcher's lock held (issue 60, finding 5).
func TestPermitOutsideLock(t *testing.T) {
	t.Parallel()
	nstest.RequireRoot(t)
	path := nstest.NewNS(t, "pl")
	sink, err := policynft.New(path)
	must(t, err)
	defer sink.Close()
	dns, err := policynft.NewDNS(path)
	must(t, err)
	defer dns.Close()
	sink.WithDNS(dns)
	xa, resolver := netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.96.0.10")
	e := policy.NewEngine("n1")
	for _, ns := range []string{"x", "y"} {
		e.SetNamespace(&policy.Namespace{Name: ns, Labels: map[string]string{"ns": ns}})
	}
	e.SetPod(&policy.Pod{Namespace: "x", Name: "a", Node: "n1", IPs: []netip.Addr{xa}})
	c := &cnpv1.ClusterNetworkPolicy{Spec: cnpv1.ClusterNetworkPolicySpec{Tier: cnpv1.AdminTier, Priority: 1,
		Subject: cnpv1.ClusterNetworkPolicySubject{Namespaces: sel("ns", "x")},
		Egress: []cnpv1.ClusterNetworkPolicyEgressRule{
			{Action: cnpv1.ClusterNetworkPolicyRuleActionAccept, To: []cnpv1.ClusterNetworkPolicyEgressPeer{{Networks: []cnpv1.CIDR{"10.96.0.10/32"}}},
				Protocols: []cnpv1.ClusterNetworkPolicyProtocol{{UDP: &cnpv1.ClusterNetworkPolicyProtocolUDP{DestinationPort: &cnpv1.Port{Number: 53}}}}},
			{Action: cnpv1.ClusterNetworkPolicyRuleActionAccept, To: []cnpv1.ClusterNetworkPolicyEgressPeer{{DomainNames: []cnpv1.DomainName{"*.example.com"}}}},
			{Action: cnpv1.ClusterNetworkPolicyRuleActionDeny, To: []cnpv1.ClusterNetworkPolicyEgressPeer{{Networks: []cnpv1.CIDR{"0.0.0.0/0"}}}},
		}}}
	c.Name = "dns"
	e.SetClusterNetworkPolicy(c)
	e.SetResolvers([]netip.Addr{resolver})
	m := e.Model()
	d := policymodel.Delta{Rules: true}
	for id := range m.Sets {
		d.AddSets = append(d.AddSets, id)
	}
	must(t, sink.Apply(m, d))
	var mu sync.Mutex // the watcher's lock
	go sink.Run(t.Context(), nil)
	for !policynft.Running(sink) { // Apply only queues from now
		time.Sleep(time.Millisecond)
	}

	evaluating, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) })
	evals := 0
	policynft.SetPermitHook(dns, func() {
		evals++
		if evals == 1 {
			close(evaluating)
			<-release
		}
	})
	server := netip.AddrPortFrom(resolver, 53)
	permitted := make(chan bool, 1)
	go func() { permitted <- dns.Permit(xa, server, policymodel.UDP) }()
	select {
	case <-evaluating:
	case <-time.After(time.Minute):
		t.Fatal("Permit never evaluated")
	}
	changed := make(chan error, 1)
	go func() {
		mu.Lock()
		d := e.SetPod(&policy.Pod{Namespace: "y", Name: "b", Node: "n1", IPs: []netip.Addr{netip.MustParseAddr("10.2.0.2")}})
		err := sink.Apply(e.Model(), d)
		mu.Unlock()
		if err == nil {
			err = sink.Wait(t.Context())
		}
		changed <- err
	}()
	select {
	case err := <-changed:
		must(t, err)
	case <-time.After(time.Minute):
		t.Fatal("y's change waited a minute for x/a's Permit")
	}
	select {
	case <-permitted:
		t.Fatal("Permit answered before its evaluation ended")
	default:
	}
	once.Do(func() { close(release) })
	if !<-permitted {
		t.Error("Permit: x/a may not send DNS to the resolver its rule allows")
	}
	// The model changed since (y/b): one evaluation more, then the cache.
	for range 3 {
		if !dns.Permit(xa, server, policymodel.UDP) {
			t.Error("Permit: x/a may not send DNS to the resolver its rule allows")
		}
	}
	if evals != 2 {
		t.Errorf("%d evaluations for 4 queries over 2 models, want 2", evals)
	}
}
