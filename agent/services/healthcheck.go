package services

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/cnibox/cnibox/internal/svcmodel"
)

// HealthChecks serve the health check node port of each LoadBalancer
// Service with externalTrafficPolicy Local, as kube-proxy's service health
// server does: 200 while the node has a ready endpoint of the Service
// and the proxy is healthy, else 503 (the load balancer then sends this
// node nothing), with kube-proxy's JSON body and headers. A server opens
// when its Service comes (or its port changes) and closes when it goes.
// Safe for concurrent use.
type HealthChecks struct {
	// Healthy is the proxy's health (nil: healthy).
	Healthy func() bool
	Log     *slog.Logger

	mu      sync.RWMutex
	servers map[svcKey]*hcServer
}

// hcServer is one Service's health check.
type hcServer struct {
	port      uint16
	endpoints int // this node's ready endpoints (distinct addresses)
	https     []*http.Server
}

// Sync opens the health checks of snap's Services, on addrs (all: on
// every address instead), closes those of the Services gone, and sets
// each one's count of local endpoints. A port that cannot be opened is
// logged and tried again at the next Sync; err says so too.
func (h *HealthChecks) Sync(snap *svcmodel.Snapshot, addrs []netip.Addr, all bool) error {
	want := map[svcKey]uint16{}
	local := map[svcKey]map[netip.Addr]bool{}
	for p := range snap.All() {
		if p.HealthCheckNodePort == 0 {
			continue
		}
		k := svcKey{p.Name.Namespace, p.Name.Name}
		want[k] = p.HealthCheckNodePort
		if local[k] == nil {
			local[k] = map[netip.Addr]bool{}
		}
		for _, e := range p.LocalEndpoints {
			if e.Ready {
				local[k][e.Addr] = true
			}
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.servers == nil {
		h.servers = map[svcKey]*hcServer{}
	}
	for k, s := range h.servers {
		if port, ok := want[k]; !ok || port != s.port {
			s.close()
			delete(h.servers, k)
		}
	}
	var errs []error
	for k, port := range want {
		s := h.servers[k]
		if s == nil {
			var err error
			if s, err = h.open(k, port, addrs, all); err != nil {
				h.log().Error("health check node port not served", "service", k.ns+"/"+k.name, "port", port, "err", err)
				errs = append(errs, err)
				continue
			}
			h.servers[k] = s
		}
		s.endpoints = len(local[k])
	}
	return errors.Join(errs...)
}

// Close closes every health check.
func (h *HealthChecks) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, s := range h.servers {
		s.close()
		delete(h.servers, k)
	}
}

func (h *HealthChecks) log() *slog.Logger {
	if h.Log == nil {
		return slog.Default()
	}
	return h.Log
}

// open listens on port of each of addrs (all: of every address) for k
// (h.mu held).
func (h *HealthChecks) open(k svcKey, port uint16, addrs []netip.Addr, all bool) (*hcServer, error) {
	hosts := []string{""}
	if !all {
		hosts = hosts[:0]
		for _, a := range addrs {
			hosts = append(hosts, a.String())
		}
	}
	s := &hcServer{port: port}
	for _, host := range hosts {
		addr := net.JoinHostPort(host, strconv.Itoa(int(port)))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("health check of %s/%s on %s: %w", k.ns, k.name, addr, err)
		}
		srv := &http.Server{Handler: h.handler(k), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
			WriteTimeout: 10 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10}
		s.https = append(s.https, srv)
		go func() { _ = srv.Serve(ln) }() // ends with close
	}
	return s, nil
}

func (s *hcServer) close() {
	for _, srv := range s.https {
		_ = srv.Close()
	}
}

// handler answers k's health check.
func (h *HealthChecks) handler(k svcKey) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h.mu.RLock()
		s := h.servers[k]
		n := 0
		if s != nil {
			n = s.endpoints
		}
		h.mu.RUnlock()
		if s == nil { // closing
			return
		}
		healthy := h.Healthy == nil || h.Healthy()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if n > 0 && healthy {
			w.WriteHeader(http.StatusOK)
		} else {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintf(w, "{\n\t\"service\": {\n\t\t\"namespace\": %q,\n\t\t\"name\": %q\n\t},\n\t\"localEndpoints\": %d,\n\t\"serviceProxyHealthy\": %v\n}",
			k.ns, k.name, n, healthy)
	})
}

// Ports are the health check ports open, by Service ("namespace/name").
func (h *HealthChecks) Ports() map[string]uint16 {
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := map[string]uint16{}
	for k, s := range h.servers {
		out[k.ns+"/"+k.name] = s.port
	}
	return out
}
