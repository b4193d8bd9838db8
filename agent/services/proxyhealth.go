package services

import (
	"fmt"
	"net/http"
	"sync"
	"time"
)

// ProxyHealth is kube-proxy's proxy health (its /healthz and /livez):
// the proxy is healthy unless a change has waited longer than Timeout
// for a successful sync (or while it never synced: it is starting);
// /healthz also says the node is no longer eligible (being deleted, or
// tainted by the cluster autoscaler) so that load balancers drain it,
// /livez does not. Safe for concurrent use.
type ProxyHealth struct {
	// Timeout is how long a queued change may wait (kube-proxy: twice
	// its sync period).
	Timeout time.Duration
	// now is the clock (time.Now; a test's own).
	now func() time.Time
	// counts, if set, counts the answers (kubeproxy_proxy_healthz_total,
	// kubeproxy_proxy_livez_total).
	counts func(path string, code int)

	mu          sync.RWMutex
	lastUpdated time.Time // zero: never synced
	oldestQueue time.Time // zero: nothing queued
	leaving     bool
}

// NewProxyHealth returns a health with kube-proxy's timeout for a sync
// period.
func NewProxyHealth(syncPeriod time.Duration) *ProxyHealth {
	return &ProxyHealth{Timeout: 2 * syncPeriod, now: time.Now}
}

// QueuedUpdate records a change waiting for a sync (the oldest counts).
func (h *ProxyHealth) QueuedUpdate() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.oldestQueue.IsZero() {
		h.oldestQueue = h.now()
	}
}

// Updated records a successful sync: nothing waits.
func (h *ProxyHealth) Updated() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.oldestQueue = time.Time{}
	h.lastUpdated = h.now()
}

// SetLeaving records whether the node is leaving (its deletion began, or
// the cluster autoscaler tainted it ToBeDeletedByClusterAutoscaler).
func (h *ProxyHealth) SetLeaving(v bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.leaving = v
}

// Healthy reports whether the proxy is healthy (the node's eligibility
// aside): it never synced, nothing waits, or what waits has waited less
// than Timeout.
func (h *ProxyHealth) Healthy() bool {
	ok, _ := h.healthy()
	return ok
}

func (h *ProxyHealth) healthy() (bool, time.Time) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.lastUpdated.IsZero() || h.oldestQueue.IsZero() {
		return true, h.lastUpdated
	}
	return h.now().Sub(h.oldestQueue) < h.Timeout, h.lastUpdated
}

// ServeHealthz answers kube-proxy's /healthz: 200 when healthy and the
// node eligible, else 503; its JSON body and headers.
func (h *ProxyHealth) ServeHealthz(w http.ResponseWriter) {
	h.mu.RLock()
	eligible := !h.leaving
	h.mu.RUnlock()
	ok, last := h.healthy()
	ok = ok && eligible
	now := h.answer(w, "/healthz", ok)
	if ok {
		last = now
	}
	fmt.Fprintf(w, `{"lastUpdated": %q,"currentTime": %q, "nodeEligible": %v}`, last, now, eligible)
}

// ServeLivez answers kube-proxy's /livez: /healthz without the node's
// eligibility.
func (h *ProxyHealth) ServeLivez(w http.ResponseWriter) {
	ok, last := h.healthy()
	now := h.answer(w, "/livez", ok)
	if ok {
		last = now
	}
	fmt.Fprintf(w, `{"lastUpdated": %q,"currentTime": %q}`, last, now)
}

// answer writes the headers and status of ok and returns the time.
func (h *ProxyHealth) answer(w http.ResponseWriter, path string, ok bool) time.Time {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	code := http.StatusOK
	if !ok {
		code = http.StatusServiceUnavailable
	}
	if h.counts != nil {
		h.counts(path, code)
	}
	w.WriteHeader(code)
	return h.now()
}
