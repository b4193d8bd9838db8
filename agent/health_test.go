package agent

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestHealth: /healthz answers 200 while the agent runs, /readyz only once
// it is also ready (lease held, device up); both 503 otherwise.
func TestHealth(t *testing.T) {
	h := &Health{}
	code := func(path string) int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		return w.Code
	}
	want := func(stage string, healthz, readyz int) {
		t.Helper()
		if got := code("/healthz"); got != healthz {
			t.Errorf("%s: /healthz %d, want %d", stage, got, healthz)
		}
		if got := code("/readyz"); got != readyz {
			t.Errorf("%s: /readyz %d, want %d", stage, got, readyz)
		}
	}
	want("not started", 503, 503)
	h.SetRunning(true)
	want("starting", 200, 503)
	h.SetReady(true)
	want("holding the lease", 200, 200)
	h.SetReady(false)
	want("lease lost", 200, 503)
	if got := code("/other"); got != 404 {
		t.Errorf("/other: %d, want 404", got)
	}
}

// TestServeHealth: the endpoint answers on its address, and an address in
// use is an error at start, not later.
func TestServeHealth(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := ServeHealth(context.Background(), busy.Addr().String(), &Health{}, log); err == nil {
		t.Error("ServeHealth on an address in use: no error")
	}
	addr := busy.Addr().String()
	busy.Close()
	h := &Health{}
	h.SetRunning(true)
	wait, err := ServeHealth(context.Background(), addr, h, log)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET /healthz: %d, want 200", resp.StatusCode)
	}
	if err := wait(); err != nil {
		t.Errorf("stop: %v", err)
	}
}

// TestServeHealthTimeouts: a client that sends nothing, and a kept-alive
// connection left idle, are closed by the server (serverTimeouts, made
// short here), not held open as long as the client likes.
func TestServeHealthTimeouts(t *testing.T) {
	saved := serverTimeouts
	defer func() { serverTimeouts = saved }()
	serverTimeouts.header, serverTimeouts.read, serverTimeouts.write, serverTimeouts.idle = 200*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond, 200*time.Millisecond
	h := &Health{}
	h.SetRunning(true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	wait, err := ServeHealth(context.Background(), addr, h, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer wait()
	closed := func(what string, c net.Conn) {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(10 * time.Second)) // the test's bound, far past the server's
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Errorf("%s: the server did not close the connection: %v", what, err)
		}
	}
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	closed("a client that sends nothing", silent)

	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	io.WriteString(idle, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(idle), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /healthz: %v %v", resp, err)
	}
	resp.Body.Close()
	closed("a kept-alive connection left idle", idle)
}

// fakeProbes answer /healthz and /livez with fixed codes.
type fakeProbes struct{ healthz, livez int }

func (f fakeProbes) ServeHealthz(w http.ResponseWriter) { w.WriteHeader(f.healthz) }
func (f fakeProbes) ServeLivez(w http.ResponseWriter)   { w.WriteHeader(f.livez) }

// TestHealthProxy: with the Services proxy, /healthz and /livez are its
// answers (kube-proxy's) while the agent runs; 503 before; without it
// /livez is /healthz.
func TestHealthProxy(t *testing.T) {
	h := &Health{}
	code := func(path string) int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		return w.Code
	}
	h.SetRunning(true)
	if c := code("/livez"); c != 200 {
		t.Errorf("no proxy: /livez %d, want 200 as /healthz", c)
	}
	h.SetProxy(fakeProbes{healthz: 503, livez: 200})
	if hz, lz := code("/healthz"), code("/livez"); hz != 503 || lz != 200 {
		t.Errorf("proxy (node leaving): /healthz %d, /livez %d; want the proxy's 503, 200", hz, lz)
	}
	h.SetRunning(false)
	if c := code("/livez"); c != 503 {
		t.Errorf("not running: /livez %d, want 503", c)
	}
}

// TestProxyStatus: kube-proxy's metrics port answers /proxyMode with the
// mode and /metrics with the agent's metrics, and nothing else (not the
// probes: kube-proxy serves those on its healthz port).
func TestProxyStatus(t *testing.T) {
	h := &Health{Metrics: NewMetrics()}
	h.SetRunning(true)
	get := func(path string) (int, string) {
		w := httptest.NewRecorder()
		h.ProxyStatus().ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		return w.Code, w.Body.String()
	}
	if c, b := get("/proxyMode"); c != 200 || b != "nftables" {
		t.Errorf("/proxyMode: %d %q, want 200 nftables", c, b)
	}
	if c, b := get("/metrics"); c != 200 || !strings.Contains(b, "# TYPE") {
		t.Errorf("/metrics: %d, %d bytes without a metric", c, len(b))
	}
	for _, p := range []string{"/healthz", "/readyz", "/"} {
		if c, _ := get(p); c != 404 {
			t.Errorf("%s on the metrics port: %d, want 404", p, c)
		}
	}
}
