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
	"k8s.io/client-go/tools/cache"
)

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
	k := &Kube{c: c, node: "n1", log: slog.New(slog.NewTextHandler(io.Discard, nil)), store: cache.NewStore(cache.MetaNamespaceKeyFunc)}
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
