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
//
// With the Services proxy (SetProxy), /healthz and /livez answer as
// kube-proxy's do once the agent runs (docs/services.md): /livez 503 when
// a change has waited too long for the services table, /healthz also when
// the node is leaving (load balancers drain it); a liveness probe then
// asks /livez. Without it /livez is /healthz.
type Health struct {
	running, ready atomic.Bool
	proxy          atomic.Pointer[ProxyProbes]
	// Metrics, if set, are served on /metrics and told the agent's events.
	Metrics *Metrics
}

// ProxyProbes answer kube-proxy's /healthz and /livez (agent/services'
// ProxyHealth).
type ProxyProbes interface {
	ServeHealthz(http.ResponseWriter)
	ServeLivez(http.ResponseWriter)
}

// SetProxy has p answer /healthz and /livez while the agent runs (a nil
// Health ignores it).
func (h *Health) SetProxy(p ProxyProbes) {
	if h != nil {
		h.proxy.Store(&p)
	}
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

// ServeHTTP answers /healthz, /livez, /readyz and /metrics.
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
	case "/healthz", "/livez":
		ok = h.running.Load()
		if p := h.proxy.Load(); ok && p != nil {
			if r.URL.Path == "/livez" {
				(*p).ServeLivez(w)
			} else {
				(*p).ServeHealthz(w)
			}
			return
		}
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

// Probes answers /healthz and /readyz as h does, and nothing else: what
// flanneld's --healthz-ip/--healthz-port serve (flanneld's default address
// is every one of the node's, 0.0.0.0): no /metrics there.
func (h *Health) Probes() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			http.NotFound(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// ProxyMode is what /proxyMode answers on kube-proxy's metrics port: the
// Services proxy programs nftables, as kube-proxy's nftables mode (tools
// and the e2e specs read it to know which proxy's rules to expect).
const ProxyMode = "nftables"

// ProxyStatus answers what kube-proxy's metrics port does: /metrics (h's)
// and /proxyMode; nothing else.
func (h *Health) ProxyStatus() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/proxyMode":
			fmt.Fprint(w, ProxyMode)
		case "/metrics":
			h.ServeHTTP(w, r)
		default:
			http.NotFound(w, r)
		}
	})
}

// serverTimeouts bound what a client of the health endpoint holds: the
// request's header, the whole request, the answer, and a kept-alive
// connection between requests (a probe asks once; nobody needs more).
var serverTimeouts = struct{ header, read, write, idle time.Duration }{5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute}

// ServeHealth listens on addr and serves h (a Health, or its Probes) until
// ctx ends. The listener is opened before it returns, so a port in use is a
// start error.
func ServeHealth(ctx context.Context, addr string, h http.Handler, log *slog.Logger) (wait func() error, err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	tm := serverTimeouts
	srv := &http.Server{Handler: h, ReadHeaderTimeout: tm.header, ReadTimeout: tm.read, WriteTimeout: tm.write, IdleTimeout: tm.idle,
		MaxHeaderBytes: 16 << 10}
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
