//go:build !nokube

package podapi

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/internal/kubecore"
	"k8s.io/client-go/rest"

	"github.com/cnibox/cnibox/agent/cluster"
)

// noPods is a cache that holds no pod.
type noPods struct{}

func (noPods) Get(cluster.Kind, string) (any, bool) { return nil, false }

// TestOtherNodesPods: the pod API answers and annotates only pods of its
// own node; a pod of another node is NotFound and is never patched.
func TestOtherNodesPods(t *testing.T) {
	var patched bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPatch {
			patched = true
		}
		node := "n2"
		if strings.HasSuffix(r.URL.Path, "/mine") {
			node = "n1"
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"apiVersion":"v1","kind":"Pod","metadata":{"namespace":"default","name":"x","uid":"u1"},"spec":{"nodeName":"`+node+`"}}`)
	}))
	defer srv.Close()
	c, err := kubecore.Client(&rest.Config{Host: srv.URL}, &kubeapi.Pod{}, &kubeapi.PodList{})
	if err != nil {
		t.Fatal(err)
	}
	k := &Kube{c: c, node: "n1", log: slog.New(slog.NewTextHandler(io.Discard, nil)), pods: noPods{}}
	ctx := context.Background()
	var ae *agentapi.Error
	if _, err := k.Pod(ctx, "default", "theirs", ""); !errors.As(err, &ae) || ae.Reason != agentapi.ReasonNotFound {
		t.Errorf("a pod of another node: %v; want NotFound", err)
	}
	if err := k.SetNetworkStatus(ctx, "default", "theirs", "", []byte(`[]`)); err == nil || patched {
		t.Errorf("annotate a pod of another node: %v, patched %v; want a refusal and no patch", err, patched)
	}
	if _, err := k.Pod(ctx, "default", "mine", ""); err != nil {
		t.Errorf("a pod of this node: %v", err)
	}
	if err := k.SetNetworkStatus(ctx, "default", "mine", "", []byte(`[]`)); err != nil || !patched {
		t.Errorf("annotate a pod of this node: %v, patched %v", err, patched)
	}
}

// cachedPods is a cache that holds the given pods.
type cachedPods map[string]*cluster.Pod

func (c cachedPods) Get(kind cluster.Kind, key string) (any, bool) {
	p, ok := c[key]
	return p, ok && kind == cluster.NodePods
}

// TestPodFromCache: a pod of this node that the cache keeps whole (its UID
// and annotations, cluster.Pod.Local) is answered without a call to the
// API server; one of another UID, or that the cache keeps slim only (of
// another node), is asked of the API server.
func TestPodFromCache(t *testing.T) {
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.URL.Path)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"apiVersion":"v1","kind":"Pod","metadata":{"namespace":"default","name":"x","uid":"u2","annotations":{"a":"api"}},"spec":{"nodeName":"n1"}}`)
	}))
	defer srv.Close()
	c, err := kubecore.Client(&rest.Config{Host: srv.URL}, &kubeapi.Pod{}, &kubeapi.PodList{})
	if err != nil {
		t.Fatal(err)
	}
	pods := cachedPods{
		"default/x":     {Namespace: "default", Name: "x", Node: "n1", Local: &cluster.LocalPod{UID: "u1", Annotations: map[string]string{"a": "cache"}}},
		"default/slim":  {Namespace: "default", Name: "slim", Node: "n1"},
		"default/other": {Namespace: "default", Name: "other", Node: "n2"},
	}
	k := &Kube{c: c, node: "n1", log: slog.New(slog.NewTextHandler(io.Discard, nil)), pods: pods}
	ctx := context.Background()
	p, err := k.Pod(ctx, "default", "x", "u1")
	if err != nil || p.UID != "u1" || p.Annotations["a"] != "cache" || p.NodeName != "n1" || len(asked) != 0 {
		t.Errorf("a cached pod of this node: %+v, %v, API asked %v; want the cache's, no call", p, err, asked)
	}
	if p, err := k.Pod(ctx, "default", "x", "u2"); err != nil || p.Annotations["a"] != "api" || len(asked) != 1 {
		t.Errorf("a pod of another UID than the cache's: %+v, %v, API asked %v; want the API server's", p, err, asked)
	}
	for _, name := range []string{"slim", "other"} {
		n := len(asked)
		k.Pod(ctx, "default", name, "")
		if len(asked) != n+1 {
			t.Errorf("pod %s, which the cache keeps slim only: answered without the API server", name)
		}
	}
}
