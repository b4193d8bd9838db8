//go:build !nokube

package kubelease

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/agent/lease"
	"github.com/cnibox/cnibox/internal/kubecore"
	"k8s.io/client-go/rest"
)

// TestRequestDeadline: an API server that accepts a request and never
// answers fails the node's read and its annotation patch after the request
// timeout, instead of holding the agent's loop (whose context has no end).
func TestRequestDeadline(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	c, err := kubecore.Client(&rest.Config{Host: srv.URL}, &kubeapi.Node{}, &kubeapi.NodeList{})
	if err != nil {
		t.Fatal(err)
	}
	an, _ := NewAnnotations("flannel.alpha.coreos.com")
	m := &Manager{c: c, timeout: 200 * time.Millisecond, node: "n1", an: an, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for name, call := range map[string]func() error{
		"getNode": func() error { _, err := m.getNode(context.Background()); return err },
		"publish": func() error { return m.publish(context.Background(), &kubeapi.Node{}, lease.Attrs{}) },
	} {
		done := make(chan error, 1)
		go func() { done <- call() }()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("%s against a server that never answers: no error", name)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s against a server that never answers: still waiting after 10 s", name)
		}
	}
}
