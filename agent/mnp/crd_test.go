//go:build !nokube

package mnp

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/cnibox/cnibox/internal/kubecore"
)

// TestWaitServedCRDLater: the watcher waits for the MultiNetworkPolicy CRD
// by asking discovery again, and goes on at the first answer that serves
// the resource, not at an informer's backoff; with the CRD never there it
// waits until its context ends.
func TestWaitServedCRDLater(t *testing.T) {
	var asked, installAt atomic.Int32
	installAt.Store(3)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/apis/k8s.cni.cncf.io/v1beta1" {
			http.NotFound(w, r)
			return
		}
		if asked.Add(1) < installAt.Load() {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"k8s.cni.cncf.io/v1beta1",`+
			`"resources":[{"name":"multi-networkpolicies","namespaced":true,"kind":"MultiNetworkPolicy","verbs":["list","watch"]}]}`)
	}))
	defer srv.Close()
	c, err := kubecore.GroupClient(&rest.Config{Host: srv.URL}, GroupVersion(), "/apis", &MultiNetworkPolicy{}, &MultiNetworkPolicyList{})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := waitServed(ctx, c, 10*time.Millisecond, log); err != nil {
		t.Fatalf("waitServed: %v", err)
	}
	if n := asked.Load(); n != 3 {
		t.Errorf("discovery asked %d times, want 3 (two 404s, then the CRD)", n)
	}
	installAt.Store(1 << 30) // never
	short, stop := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer stop()
	if err := waitServed(short, c, 10*time.Millisecond, log); err == nil {
		t.Error("waitServed returned nil with no CRD served")
	}
}
