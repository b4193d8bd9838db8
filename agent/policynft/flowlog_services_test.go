package policynft_test

import (
	"net/netip"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibox/cnibox/agent/loggedflows"
	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/internal/policymodel"
)

// TestFlowLogServices: the flow log's event of a connection to a Service
// has the backend as its destination (what the policy judged) and the
// frontend the client sent to (conntrack's original destination, which
// the kernel passes with each logged packet): a ClusterIP from a pod and a
// NodePort from off the cluster, both families. A connection to a pod's
// own address has no frontend. (The agent names the Service from the
// frontend: agent/policy's TestFlowLogRecordService.)
func TestFlowLogServices(t *testing.T) {
	t.Parallel()
	s := newSvcLab(t, "x/b", "x/a", "x/b")
	r, err := loggedflows.Open(s.nodePath)
	must(t, err)
	r.Close()
	if !r.Frontends() {
		t.Skip("this kernel passes no conntrack entry with a logged packet (CONFIG_NETFILTER_NETLINK_GLUE_CT): make test-kernel runs this test on Debian's stock kernel")
	}
	s.n.e.SetFlowLog(policy.FlowLogSetting{Allow: true, Deny: true})
	// A rule allows, and the log has its verdicts (a default allow is
	// not logged).
	s.n.e.SetNetworkPolicy(np("x", "open", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "b"), PolicyTypes: ingress,
		Ingress: []networkingv1.NetworkPolicyIngressRule{{}}}))
	s.n.start()
	events := readVerdicts(t, s.lab)
	xa, xb := s.pod("x/a"), s.pod("x/b")
	await := func(what string, f func(loggedflows.Event) bool) loggedflows.Event {
		t.Helper()
		deadline := time.After(time.Minute)
		for {
			select {
			case ev := <-events:
				if f(ev) {
					return ev
				}
			case <-deadline:
				t.Fatalf("no flow log event for %s", what)
			}
		}
	}
	for _, v6 := range []bool{false, true} {
		for _, c := range []struct {
			what     string
			from     *labPod
			src      netip.Addr
			frontend netip.AddrPort
		}{
			{"x/a to the ClusterIP", xa, pick(v6, xa.ip, xa.ip6), netip.AddrPortFrom(pick(v6, svcCIP4, svcCIP6), svcPort)},
			{"off the cluster to the NodePort", s.outside, pick(v6, outClient4, outClient6), netip.AddrPortFrom(pick(v6, outNode4, outNode6), svcNodePort)},
		} {
			if !connect(t, c.from, c.frontend.Addr(), policymodel.TCP, c.frontend.Port(), allowWait) {
				t.Fatalf("%s %v: no connection", c.what, c.frontend)
			}
			ev := await(c.what, func(ev loggedflows.Event) bool { return ev.Allow && ev.Src.Addr() == c.src && ev.Dst.Port() == 80 })
			if be := pick(v6, xb.ip, xb.ip6); ev.Dst.Addr() != be || ev.Frontend != c.frontend {
				t.Errorf("%s (%s): logged %+v, want to the backend %v:80 with the frontend %v", c.what, fam(v6), ev, be, c.frontend)
			}
		}
		// Straight to the pod: no frontend.
		if !connect(t, xa, pick(v6, xb.ip, xb.ip6), policymodel.TCP, 81, allowWait) {
			t.Fatal("x/a does not reach x/b:81")
		}
		ev := await("x/a to x/b:81", func(ev loggedflows.Event) bool { return ev.Allow && ev.Dst.Port() == 81 })
		if ev.Frontend.IsValid() {
			t.Errorf("x/a to x/b:81 straight: logged with the frontend %v, want none", ev.Frontend)
		}
		for len(events) > 0 {
			<-events
		}
	}
}
