package policynft_test

import (
	"context"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibox/cnibox/agent/loggedflows"
	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/internal/policymodel"
)

// TestFlowLogVerdicts: with the flow log on, the kernel logs a denied
// connection with the isolation's counter and an allowed one with the
// allowing rule's, addresses and ports as sent, and the agent's reader
// gets them; with the namespace's scope only, a connection between pods
// of namespaces that do not log is not logged.
func TestFlowLogVerdicts(t *testing.T) {
	t.Parallel()
	l := newLab(t, "x/a", "x/b", "y/a")
	n := newNode(t, l)
	n.e.SetNetworkPolicy(web(80))
	n.e.SetFlowLog(policy.FlowLogSetting{Allow: true, Deny: true})
	n.start()
	events := readVerdicts(t, l)
	xa, xb, ya := l.pod("x/a"), l.pod("x/b"), l.pod("y/a")
	// wait for one event matching f, up to a generous deadline
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
	if connect(t, xb, xa.ip, policymodel.TCP, 81, denyWait) {
		t.Fatal("x/b reaches x/a:81 under web(80)")
	}
	ev := await("x/b -> x/a:81 denied", func(ev loggedflows.Event) bool { return !ev.Allow && ev.Dst.Port() == 81 })
	if ev.Counter != "iso-in" || ev.Src.Addr() != xb.ip || ev.Dst.Addr() != xa.ip || ev.Proto != 6 {
		t.Errorf("denied: %+v, want counter iso-in from %s to %s:81/TCP", ev, xb.ip, xa.ip)
	}
	if !connect(t, ya, xa.ip, policymodel.TCP, 80, allowWait) {
		t.Fatal("y/a does not reach x/a:80 under web(80)")
	}
	ev = await("y/a -> x/a:80 allowed", func(ev loggedflows.Event) bool { return ev.Allow && ev.Dst.Port() == 80 })
	if want := policymodel.ShortID("np/x/web/ingress/0"); ev.Counter != want || ev.Src.Addr() != ya.ip {
		t.Errorf("allowed: %+v, want counter %s (np/x/web's rule 0) from %s", ev, want, ya.ip)
	}

	// Only the namespace y logs denials: x/b -> x/a is not logged, y/a's
	// denied connection is.
	n.do(func(e *policy.Engine) policymodel.Delta { return e.SetFlowLog(policy.FlowLogSetting{}) })
	n.do(func(e *policy.Engine) policymodel.Delta {
		return e.SetNamespace(&policy.Namespace{Name: "y", Labels: map[string]string{"ns": "y"}, FlowLog: policy.FlowLogSetting{Deny: true}})
	})
	for len(events) > 0 {
		<-events
	}
	connect(t, xb, xa.ip, policymodel.TCP, 82, denyWait)
	connect(t, ya, xa.ip, policymodel.TCP, 83, denyWait)
	ev = await("y/a -> x/a:83 denied", func(ev loggedflows.Event) bool { return ev.Dst.Port() == 83 || ev.Dst.Port() == 82 })
	if ev.Dst.Port() != 83 || ev.Allow {
		t.Errorf("logged %+v: want only y/a's denied connection to port 83", ev)
	}
}

// TestFlowLogStaged: a staged policy is not enforced (its pod stays
// reachable), and the kernel logs the default allow of the pods it
// selects, and only theirs, for the agent to compare.
func TestFlowLogStaged(t *testing.T) {
	t.Parallel()
	l := newLab(t, "x/a", "x/b", "y/a")
	n := newNode(t, l)
	n.e.SetFlowLog(policy.FlowLogSetting{})
	n.e.SetStagedNetworkPolicy(np("x", "lockdown", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "a"),
		Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("app", "nobody")}}}}}))
	n.start()
	// The reader is bound from Open on: what the kernel logs before Run
	// starts (here: all of it) waits for Run, not lost.
	events, run := openVerdicts(t, l)
	xa, xb, ya := l.pod("x/a"), l.pod("x/b"), l.pod("y/a")
	if !connect(t, ya, xb.ip, policymodel.TCP, 80, allowWait) || !connect(t, ya, xa.ip, policymodel.TCP, 80, allowWait) {
		t.Fatal("y/a cannot reach x/a or x/b: a staged policy is enforced")
	}
	run()
	deadline := time.After(time.Minute)
	for {
		select {
		case ev := <-events:
			if ev.Dst.Addr() == xb.ip {
				t.Fatalf("x/b, which no staged policy selects, logged: %+v", ev)
			}
			if ev.Dst.Addr() == xa.ip {
				if !ev.Allow || ev.Counter != "dflt-in" || ev.Src.Addr() != ya.ip {
					t.Errorf("x/a's connection logged as %+v, want the default allow (dflt-in) from %s", ev, ya.ip)
				}
				return
			}
		case <-deadline:
			t.Fatal("no flow log event for y/a -> x/a, which a staged policy selects")
		}
	}
}

// readVerdicts reads the node's verdict log until the test ends.
func readVerdicts(t *testing.T, l *lab) <-chan loggedflows.Event {
	events, run := openVerdicts(t, l)
	run()
	return events
}

// openVerdicts binds to the node's verdict log; run starts reading it
// into events until the test ends.
func openVerdicts(t *testing.T, l *lab) (<-chan loggedflows.Event, func()) {
	r, err := loggedflows.Open(l.nodePath)
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan loggedflows.Event, 100)
	done := make(chan struct{})
	started := false
	t.Cleanup(func() {
		cancel()
		if !started {
			r.Close()
			return
		}
		<-done
	})
	return events, func() {
		started = true
		go func() {
			defer close(done)
			r.Run(ctx, func(evs []loggedflows.Event) {
				for _, ev := range evs {
					select {
					case events <- ev:
					case <-ctx.Done():
						return
					}
				}
			})
		}()
	}
}
