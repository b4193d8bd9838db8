//go:build !nokube

package policy

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/cnibox/cnibox/internal/kubecore"
)

// TestCNPVersionAsksAgain: discovery that does not answer (nothing listens
// on the API's port) is asked again, with a warning each time, until the
// context ends; then the newest version, and not served. (The versions an
// API serves are TestWatchKube's: a real API server with each CRD.)
func TestCNPVersionAsksAgain(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // refused from now on
	c, err := kubecore.GroupClient(&rest.Config{Host: "http://" + addr, Timeout: time.Second}, schema.GroupVersion{Version: "v1"}, "/api")
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	gv, ok := cnpVersion(ctx, c, slog.New(slog.NewTextHandler(&logs, nil)))
	if ok || gv != cnpVersions[0] {
		t.Errorf("cnpVersion = %v, %v; want %v, false", gv, ok, cnpVersions[0])
	}
	if n := strings.Count(logs.String(), "asking again"); n < 2 {
		t.Errorf("discovery asked again %d times in 5 s (after 1 s, then 2 s): want at least 2\n%s", n, logs.String())
	}
}
