package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// Health is what the agent's health endpoint answers. /healthz (liveness)
// is 200 while the agent runs, starting included: a start that waits for
// the network configuration or the API server is not a reason to restart
// it. /readyz (readiness) is 200 once the agent holds this node's lease and
// its VXLAN device is up, and 503 while it does not. /metrics serves
// Metrics in the Prometheus text format when Metrics is set.
type Health struct {
	running, ready atomic.Bool
	// Metrics, if set, are served on /metrics and told the agent's events.
	Metrics *Metrics
}

// metrics returns h's Metrics (nil for a nil Health).
func (h *Health) metrics() *Metrics {
	if h == nil {
		return nil
	}
	return h.Metrics
}

// SetRunning says whether the agent runs (a nil Health ignores it).
func (h *Health) SetRunning(v bool) {
	if h != nil {
		h.running.Store(v)
	}
}

// SetReady says whether the agent is ready (a nil Health ignores it).
func (h *Health) SetReady(v bool) {
	if h != nil {
		h.ready.Store(v)
	}
}

// ServeHTTP answers /healthz, /readyz and /metrics.
func (h *Health) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var ok bool
	switch r.URL.Path {
	case "/metrics":
		if h.Metrics == nil {
			http.NotFound(w, r)
			return
		}
		h.Metrics.Handler().ServeHTTP(w, r)
		return
	case "/healthz":
		ok = h.running.Load()
	case "/readyz":
		ok = h.running.Load() && h.ready.Load()
	default:
		http.NotFound(w, r)
		return
	}
	if !ok {
		http.Error(w, "not ready", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

// ServeHealth listens on addr and serves h until ctx ends. The listener is
// opened before it returns, so a port in use is a start error.
func ServeHealth(ctx context.Context, addr string, h *Health, log *slog.Logger) (wait func() error, err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan error, 1)
	go func() {
		err := srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		done <- err
	}()
	stop := context.AfterFunc(ctx, func() { srv.Close() })
	log.Info("health endpoint listening", "addr", ln.Addr().String())
	return func() error { stop(); srv.Close(); return <-done }, nil
}
