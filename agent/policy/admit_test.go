//go:build !nokube

package policy

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	nv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibox/cnibox/agent/cluster"
	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/internal/policymodel"
)

// admitSink is a Sink with an attached set, as the agent's: each Apply
// keeps the model's verdict of web -> ip:80 (ingress) per address asked.
type admitSink struct {
	mu       sync.Mutex
	attached []netip.Addr
	model    func(policymodel.Conn) bool
}

func (s *admitSink) Apply(m *policymodel.Model, _ policymodel.Delta) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	// The model is the engine's and changes with the next call: judge now.
	verdicts := map[netip.Addr]bool{}
	for _, a := range []string{"10.1.0.9", "10.1.0.10"} {
		ip := netip.MustParseAddr(a)
		verdicts[ip] = m.Evaluate(policymodel.Ingress, policymodel.Conn{Src: netip.MustParseAddr("10.2.0.2"), Dst: ip, Proto: policymodel.TCP, Port: 80}).Allowed
	}
	placed := map[netip.Addr]bool{}
	for _, lp := range m.LocalPods {
		for _, ip := range lp.IPs {
			placed[ip] = true
		}
	}
	s.model = func(c policymodel.Conn) bool { return placed[c.Dst] && verdicts[c.Dst] }
	return nil
}

func (s *admitSink) Attached(ips []netip.Addr) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range ips {
		if !slices.Contains(s.attached, a) {
			return false, nil
		}
	}
	return true, nil
}

func (s *admitSink) Wait(context.Context) error { return nil }

// open reports whether the last model places ip and lets y/client (its
// address 10.2.0.2, a pod the policy allows) reach it on TCP 80.
func (s *admitSink) open(ip string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.model != nil && s.model(policymodel.Conn{Dst: netip.MustParseAddr(ip)})
}

// TestAdmit: a new pod of the node in a namespace whose policy allows
// y/client in, admitted with its ADD's address, is placed and open to the
// client before its status has an address; the informer's update without
// addresses keeps it, one with addresses ends the admission (the status
// wins); another pod admitted with the address takes it; a release drops
// it; an address not attached, a pod of another node, a pod the informer
// never shows are refused.
func TestAdmit(t *testing.T) {
	sink := &admitSink{attached: []netip.Addr{netip.MustParseAddr("10.1.0.9"), netip.MustParseAddr("10.1.0.10")}}
	w := &watcher{e: NewEngine(node), cfg: WatchConfig{Syncer: sink, Log: slog.New(slog.DiscardHandler)}}
	h := w.handler()
	for _, ns := range []string{"x", "y"} {
		h.OnAdd(&cluster.Namespace{Name: ns, Labels: map[string]string{"ns": ns}}, true)
	}
	pod := func(ns, name, node string, labels map[string]string, ips ...string) *Pod {
		p := &Pod{Namespace: ns, Name: name, Node: node, Labels: labels}
		for _, a := range ips {
			p.IPs = append(p.IPs, netip.MustParseAddr(a))
		}
		return p
	}
	h.OnAdd(pod("y", "client", "other", map[string]string{"app": "client"}, "10.2.0.2"), true)
	h.OnAdd(np("x", "web", nv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		Ingress: []nv1.NetworkPolicyIngressRule{{From: []nv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"ns": "y"}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}},
		}}}},
	}), true)
	if err := w.start(); err != nil {
		t.Fatal(err)
	}
	web := map[string]string{"app": "web"}
	h.OnAdd(pod("x", "web-1", node, web), false) // scheduled, no status yet
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := &Admitter{}
	adm.set(w)
	admit := func(name string, ips ...string) *agentapi.Response {
		req := agentapi.Request{Op: agentapi.OpPolicyAdmit, Namespace: "x", Name: name, Policy: &agentapi.PolicyRequest{}}
		for _, a := range ips {
			req.Policy.IPs = append(req.Policy.IPs, netip.MustParseAddr(a))
		}
		return adm.Serve(ctx, req)
	}

	if r := admit("web-1", "10.1.0.9"); r.Error != "" {
		t.Fatalf("admit: %s", r.Error)
	}
	if !sink.open("10.1.0.9") {
		t.Fatal("web-1 admitted with 10.1.0.9: not placed and open to y/client")
	}
	h.OnUpdate(nil, pod("x", "web-1", node, web)) // an update without addresses
	if !sink.open("10.1.0.9") {
		t.Error("an update of web-1 without addresses lost the admitted one")
	}

	// Another pod admitted with that address (its IPAM gave it out again)
	// takes it from web-1.
	h.OnAdd(pod("x", "web-2", node, web), false)
	if r := admit("web-2", "10.1.0.9"); r.Error != "" {
		t.Fatalf("admit web-2: %s", r.Error)
	}
	w.mu.Lock()
	held1, held2 := w.admitted["x/web-1"], w.admitted["x/web-2"]
	w.mu.Unlock()
	if len(held1) != 0 || len(held2) != 1 {
		t.Errorf("admissions after web-2 took 10.1.0.9: web-1 %v, web-2 %v", held1, held2)
	}
	// Its status wins over the admission.
	h.OnUpdate(nil, pod("x", "web-2", node, web, "10.1.0.10"))
	w.mu.Lock()
	_, still := w.admitted["x/web-2"]
	w.mu.Unlock()
	if still || sink.open("10.1.0.9") || !sink.open("10.1.0.10") {
		t.Errorf("web-2's status 10.1.0.10: admission kept %v, 10.1.0.9 open %v, 10.1.0.10 open %v", still, sink.open("10.1.0.9"), sink.open("10.1.0.10"))
	}

	// A release (the DEL) drops an admission.
	h.OnAdd(pod("x", "web-3", node, web), false)
	if r := admit("web-3", "10.1.0.9"); r.Error != "" || !sink.open("10.1.0.9") {
		t.Fatalf("admit web-3: %q, open %v", r.Error, sink.open("10.1.0.9"))
	}
	if r := adm.Serve(ctx, agentapi.Request{Op: agentapi.OpPolicyRelease, Policy: &agentapi.PolicyRequest{IPs: []netip.Addr{netip.MustParseAddr("10.1.0.9")}}}); r.Error != "" {
		t.Fatalf("release: %s", r.Error)
	}
	if sink.open("10.1.0.9") {
		t.Error("10.1.0.9 still placed after its release")
	}

	for _, c := range []struct {
		name, ip, want string
		reason         agentapi.Reason
	}{
		{"web-3", "10.1.0.77", "attached set", agentapi.ReasonBadRequest},
		{"web-3", "10.1.0.10", "x/web-2's status holds it", agentapi.ReasonBadRequest}, // another pod's address
		{"far", "10.1.0.9", "not this node's", agentapi.ReasonBadRequest},
	} {
		if c.name == "far" {
			h.OnAdd(pod("x", "far", "other", web), false)
		}
		if r := admit(c.name, c.ip); !strings.Contains(r.Error, c.want) || r.Reason != c.reason {
			t.Errorf("admit %s %s: %q (%s), want %q (%s)", c.name, c.ip, r.Error, r.Reason, c.want, c.reason)
		}
	}
	short, stop := context.WithTimeout(ctx, 200*time.Millisecond)
	defer stop()
	if r := adm.Serve(short, agentapi.Request{Op: agentapi.OpPolicyAdmit, Namespace: "x", Name: "never", Policy: &agentapi.PolicyRequest{IPs: []netip.Addr{netip.MustParseAddr("10.1.0.9")}}}); !strings.Contains(r.Error, "not in the watcher's informer") {
		t.Errorf("admit of a pod the informer never shows: %q", r.Error)
	}
	if r := (&Admitter{}).Serve(ctx, agentapi.Request{Op: agentapi.OpPolicyAdmit, Namespace: "x", Name: "web-1", Policy: &agentapi.PolicyRequest{IPs: []netip.Addr{netip.MustParseAddr("10.1.0.9")}}}); r.Reason != agentapi.ReasonUnavailable {
		t.Errorf("admit before the watcher runs: %q (%s), want unavailable", r.Error, r.Reason)
	}
}
