package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestHealthzPort: --healthz-ip/--healthz-port serve flanneld's /healthz
// (200 as soon as the server listens) and /readyz (503 until the agent is
// ready), as kube-flannel.yml's probes ask, and not /metrics; beside
// --health-addr, both answer from one state.
func TestHealthzPort(t *testing.T) {
	free := func() int {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().(*net.TCPAddr).Port
	}
	port, other := free(), free()
	f, err := parseFlagsEnv([]string{"--healthz-ip", "127.0.0.1", "--healthz-port", strconv.Itoa(port),
		"--health-addr", "127.0.0.1:" + strconv.Itoa(other)}, io.Discard, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h, stop, err := serveHealth(ctx, f, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	hc := &http.Client{Timeout: 5 * time.Second}
	get := func(p int, path string) int {
		resp, err := hc.Get("http://127.0.0.1:" + strconv.Itoa(p) + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, p := range []int{port, other} {
		if c := get(p, "/healthz"); c != 200 {
			t.Errorf(":%d/healthz = %d before the agent is ready, want 200 (flanneld's answers while it runs)", p, c)
		}
		if c := get(p, "/readyz"); c != 503 {
			t.Errorf(":%d/readyz = %d before ready, want 503", p, c)
		}
	}
	h.SetReady(true)
	for _, p := range []int{port, other} {
		if c := get(p, "/readyz"); c != 200 {
			t.Errorf(":%d/readyz = %d once ready, want 200", p, c)
		}
	}
	// /metrics on --health-addr only: flanneld's address is 0.0.0.0 by
	// default, and its server has no /metrics
	if c := get(port, "/metrics"); c != 404 {
		t.Errorf("--healthz-port /metrics = %d, want 404 (metrics are --health-addr's)", c)
	}
	if c := get(other, "/metrics"); c != 200 {
		t.Errorf("--health-addr /metrics = %d, want 200", c)
	}

	// A port in use is a start error naming the flags.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f2, _ := parseFlagsEnv([]string{"--healthz-ip", "127.0.0.1", "--healthz-port", strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)}, io.Discard, noEnv)
	if _, _, err := serveHealth(ctx, f2, slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil || !strings.Contains(err.Error(), "--healthz-ip/--healthz-port") {
		t.Errorf("serveHealth on a port in use = %v; want an error naming the flags", err)
	}
}
