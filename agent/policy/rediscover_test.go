//go:build !nokube

package policy

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/cnibox/cnibox/internal/flowlog"
	"github.com/cnibox/cnibox/internal/kubecore"
)

// TestRediscover: the watch ends with errAPIChanged once discovery says
// the API serves another ClusterNetworkPolicy version than the one
// watched (none -> v1alpha2, v1alpha2 -> v1beta1) or other staged
// resources; while it serves the same, or does not answer, the watch
// goes on.
func TestRediscover(t *testing.T) {
	var serving atomic.Value // "": nothing; "v1alpha2", "v1beta1"; "down"
	var stagedOn atomic.Bool
	serving.Store("")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := serving.Load().(string)
		switch {
		case v == "down":
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
		case strings.HasPrefix(r.URL.Path, "/apis/policy.networking.k8s.io/"+v) && v != "":
			w.Write([]byte(`{"kind":"APIResourceList","groupVersion":"policy.networking.k8s.io/` + v + `","resources":[{"name":"clusternetworkpolicies","namespaced":false,"kind":"ClusterNetworkPolicy","verbs":["list","watch"]}]}`))
		case strings.HasPrefix(r.URL.Path, "/apis/cnibox.io/") && stagedOn.Load():
			w.Write([]byte(`{"kind":"APIResourceList","groupVersion":"cnibox.io/v1alpha1","resources":[{"name":"stagednetworkpolicies","namespaced":true,"kind":"StagedNetworkPolicy","verbs":["list","watch"]}]}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	c, err := kubecore.GroupClient(&rest.Config{Host: srv.URL}, schema.GroupVersion{Version: "v1"}, "/api")
	if err != nil {
		t.Fatal(err)
	}
	// run rediscovers with seen, then change; it returns how the watch
	// ended (nil: it went on for 20 rounds after the change, or 10 s
	// when end says it should end).
	run := func(t *testing.T, cfg WatchConfig, seen apiSeen, change func(), end bool) error {
		t.Helper()
		w := &watcher{cfg: cfg}
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		done := make(chan struct{})
		go func() { defer close(done); w.rediscover(ctx, cancel, c, seen, 10*time.Millisecond) }()
		time.Sleep(50 * time.Millisecond) // rounds that see no change
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		change()
		wait := 200 * time.Millisecond
		if end {
			wait = 10 * time.Second
		}
		select {
		case <-done:
			return context.Cause(ctx)
		case <-time.After(wait):
			cancel(nil)
			<-done
			return nil
		}
	}
	cnp := WatchConfig{ClusterNetworkPolicies: true}
	if err := run(t, cnp, apiSeen{}, func() { serving.Store("v1alpha2") }, true); !errors.Is(err, errAPIChanged) {
		t.Errorf("the CRD installed: %v, want errAPIChanged", err)
	}
	if err := run(t, cnp, apiSeen{cnp: "policy.networking.k8s.io/v1alpha2"}, func() { serving.Store("v1beta1") }, true); !errors.Is(err, errAPIChanged) {
		t.Errorf("the CRD upgraded: %v, want errAPIChanged", err)
	}
	if err := run(t, cnp, apiSeen{cnp: "policy.networking.k8s.io/v1beta1"}, func() { serving.Store("down") }, false); err != nil {
		t.Errorf("discovery down: %v, want the watch to go on", err)
	}
	serving.Store("v1beta1")
	flowLog := WatchConfig{FlowLog: nopFlowLog{}}
	defer stagedOn.Store(false)
	if err := run(t, flowLog, apiSeen{}, func() { stagedOn.Store(true) }, true); !errors.Is(err, errAPIChanged) {
		t.Errorf("the staged CRDs installed: %v, want errAPIChanged", err)
	}
	if err := run(t, cnp, apiSeen{cnp: "policy.networking.k8s.io/v1beta1"}, func() {}, false); err != nil {
		t.Errorf("nothing changed: %v, want the watch to go on", err)
	}
}

// nopFlowLog is a flow log that keeps nothing.
type nopFlowLog struct{}

func (nopFlowLog) Write(flowlog.Record) error { return nil }
func (nopFlowLog) Flush(time.Time) error      { return nil }
