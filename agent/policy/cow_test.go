package policy

import (
	"fmt"
	"net/netip"
	"testing"

	nv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// TestModelNeverChanges: a model the engine handed out stays as it was
// through every kind of change that followed (pods added, relabelled,
// deleted; a namespace relabelled; nodes; policies set and deleted), so a
// reader may keep it without the engine's lock; a change that changed the
// model hands out a model of another generation.
func TestModelNeverChanges(t *testing.T) {
	in := testCluster([]*nv1.NetworkPolicy{np("x", "web", nv1.NetworkPolicySpec{PodSelector: *sel("pod", "a"),
		Ingress: []nv1.NetworkPolicyIngressRule{{From: []nv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "y"), PodSelector: &metav1.LabelSelector{}}},
			Ports: []nv1.NetworkPolicyPort{port("", "web")}}}})}, nil)
	e := scaleEngine(in)
	big := func(i int) *Pod { // enough pods for the peer set to split in parts
		return &Pod{Namespace: "y", Name: fmt.Sprint("p", i), Node: "n2", Labels: map[string]string{"pod": "p"},
			IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 2, byte(1 + i>>8), byte(i)})}, Ports: []NamedPort{{Name: "web", Proto: 6, Port: 8080}}}
	}
	for i := range 700 {
		e.SetPod(big(i))
	}
	changes := []func(){
		func() { e.SetPod(big(700)) },
		func() { q := big(3); q.Labels = map[string]string{"pod": "q"}; e.SetPod(q) },
		func() { e.DeletePod("y", "p4") },
		func() { p := *in.Pods[0]; p.IPs = []netip.Addr{netip.MustParseAddr("10.1.0.77")}; e.SetPod(&p) }, // x/a, local
		func() { e.DeletePod("x", "b") },
		func() { e.SetNamespace(&Namespace{Name: "y", Labels: map[string]string{"ns": "y", "new": "1"}}) },
		func() { e.SetNamespace(&Namespace{Name: "z", Labels: map[string]string{"ns": "y"}}) },
		func() { e.SetNode(&Node{Name: "n2", IPs: []netip.Addr{netip.MustParseAddr("192.0.2.2")}}) },
		func() { e.SetNodeAddrs([]netip.Addr{netip.MustParseAddr("192.0.2.1")}) },
		func() {
			e.SetNetworkPolicy(np("y", "deny", nv1.NetworkPolicySpec{PolicyTypes: ingressOnly}))
		},
		func() { e.DeleteNetworkPolicy("x", "web") },
	}
	for i, change := range changes {
		m := e.Model()
		before, gen := dump(m), m.Generation
		stop, read := make(chan struct{}), make(chan struct{})
		go func() { // a reader without the engine's lock (go test -race)
			defer close(read)
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, s := range m.Sets {
					s.Elems()
					s.Contains(ip("y", "a"))
				}
				m.Evaluate(0, policymodel.Conn{Src: ip("y", "a"), Dst: ip("x", "a"), Proto: policymodel.TCP, Port: 80})
			}
		}()
		change()
		close(stop)
		<-read
		if got := dump(m); got != before {
			t.Fatalf("change %d changed the model handed out before it:\nbefore\n%s\nafter\n%s", i, before, got)
		}
		if now := e.Model(); m.Generation != gen || dump(now) != before && now.Generation == gen {
			t.Errorf("change %d: generation %d -> handed out %d, now %d: want it kept, and a changed model's another", i, gen, m.Generation, now.Generation)
		}
	}
}
