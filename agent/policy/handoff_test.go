//go:build !nokube

package policy

import (
	"context"
	"log/slog"
	"regexp"
	"testing"
	"time"

	"github.com/google/nftables"
	nv1 "k8s.io/api/networking/v1"

	"github.com/cnibox/cnibox/agent/policynft"
	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nft/nftfake"
)

// notTheModels are the policy table's sets whose elements are not the
// model's (agent/policynft's fake tests say why).
var notTheModels = regexp.MustCompile(`(?m)^\t(set|map) (gen|gen-f|gen-e|mark-eg|mark-in|attached-4|attached-6) \{\n(\t\t.*\n)*?\t\}\n`)

func policyTable(k *nftfake.Kernel) string {
	return notTheModels.ReplaceAllString(k.Table(nftables.TableFamilyINet, nft.PolicyTable), "\t$1 $2\n")
}

// TestHandoff: the watcher hands its models to agent/policynft's Syncer
// (on nftfake, as any user) while the Syncer commits on its own
// goroutine, pods churning and policies changing in the engine the whole
// time, with the watcher's lock held while the Syncer commits (it never
// takes it). Under -race a model read by the Syncer while the engine
// changes it in place is a race; at the end the table is the one a full
// sync of the last model writes.
func TestHandoff(t *testing.T) {
	k := nftfake.New()
	sy := policynft.NewOn(nft.OpenDial(k.Dial()))
	defer sy.Close()
	w := &watcher{e: NewEngine(node), cfg: WatchConfig{Syncer: sy, Log: slog.New(slog.DiscardHandler)}}
	in := testCluster([]*nv1.NetworkPolicy{np("x", "web", nv1.NetworkPolicySpec{PodSelector: *sel("app", "a"),
		Ingress: []nv1.NetworkPolicyIngressRule{{From: []nv1.NetworkPolicyPeer{{PodSelector: sel("app", "b")}}}}})}, nil)
	for _, ns := range in.Namespaces {
		w.e.SetNamespace(ns)
	}
	for _, p := range in.Pods {
		w.e.SetPod(p)
	}
	for _, p := range in.NetworkPolicies {
		w.e.SetNetworkPolicy(p)
	}
	if err := w.start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sy.Run(ctx, nil) }()
	defer func() { cancel(); <-done }()

	for i := range 200 {
		p := *in.Pods[i%len(in.Pods)]
		p.Labels = map[string]string{"app": []string{"a", "b", "c"}[i%3]}
		w.apply(func(e *Engine) policymodel.Delta { return e.SetPod(&p) })
		if i%20 == 0 {
			pt := port("", 80+i%3)
			w.apply(func(e *Engine) policymodel.Delta {
				return e.SetNetworkPolicy(np("y", "p", nv1.NetworkPolicySpec{Ingress: []nv1.NetworkPolicyIngressRule{{Ports: []nv1.NetworkPolicyPort{pt}}}}))
			})
		}
		if i%50 == 0 {
			w.apply(func(e *Engine) policymodel.Delta { return e.DeletePod(p.Namespace, p.Name) })
			w.apply(func(e *Engine) policymodel.Delta { return e.SetPod(&p) })
		}
	}
	w.mu.Lock() // held while the Syncer commits what is queued
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	if err := sy.Wait(wctx); err != nil {
		w.mu.Unlock()
		t.Fatalf("the queued changes not committed with the watcher's lock held: %v", err)
	}
	m := w.e.Model()
	w.mu.Unlock()

	fresh := nftfake.New()
	fs := policynft.NewOn(nft.OpenDial(fresh.Dial()))
	defer fs.Close()
	if err := fs.Full(m); err != nil {
		t.Fatal(err)
	}
	if got, want := policyTable(k), policyTable(fresh); got != want {
		t.Errorf("the table after the churn is not the last model's:\ngot:\n%s\nwant:\n%s", got, want)
	}
	if st := sy.Stats(); st.Failed > 0 {
		t.Errorf("%d transactions failed", st.Failed)
	}
	for _, kk := range []*nftfake.Kernel{k, fresh} {
		if err := kk.Err(); err != nil {
			t.Errorf("the fake kernel was sent what it does not model: %v", err)
		}
	}
}
