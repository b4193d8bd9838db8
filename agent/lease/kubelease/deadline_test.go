//go:build !nokube

package kubelease

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/agent/lease"
	"github.com/cnibox/cnibox/internal/kubecore"
	"github.com/cnibox/cnibox/internal/kubecore/kubecoretest"
)

// TestRequestDeadline: an API server that accepts a request and never
// answers fails the node's read and its annotation patch after the request
// timeout, instead of holding the agent's loop (whose context has no end).
func TestRequestDeadline(t *testing.T) {
	c, err := kubecore.Client(kubecoretest.Silent(t), &kubeapi.Node{}, &kubeapi.NodeList{})
	if err != nil {
		t.Fatal(err)
	}
	an, _ := NewAnnotations("flannel.alpha.coreos.com")
	m := &Manager{c: c, timeout: 200 * time.Millisecond, node: "n1", an: an, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for name, call := range map[string]func() error{
		"getNode": func() error { _, err := m.getNode(context.Background()); return err },
		"publish": func() error { return m.publish(context.Background(), &kubeapi.Node{}, lease.Attrs{}) },
	} {
		kubecoretest.GivesUp(t, name, 10*time.Second, call)
	}
}
