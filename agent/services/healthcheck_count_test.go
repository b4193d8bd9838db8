package services

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"

	"github.com/cnibox/cnibox/internal/svcmodel"
)

// freePort is a TCP port of 127.0.0.1 nothing listens on (yet).
func freePort(t *testing.T) uint16 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

// TestHealthChecksCount: the health check counts a Service's local ready
// endpoints as kube-proxy's LocalReadyEndpoints does: distinct addresses
// over all of the Service's ports (an endpoint serving two ports counts
// once), ready ones only (a terminating one this node still uses for
// Local traffic does not), whatever the path asked (a load balancer asks
// "/" or "/healthz"); a new healthCheckNodePort moves the server (the old
// port closed).
func TestHealthChecksCount(t *testing.T) {
	port, moved := freePort(t), freePort(t)
	hc := &HealthChecks{}
	t.Cleanup(hc.Close)
	lo := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	name := func(p string) svcmodel.PortName { return svcmodel.PortName{Namespace: "ns", Name: "web", Port: p} }
	ep := func(a string, ready bool) svcmodel.Endpoint {
		return svcmodel.Endpoint{Addr: netip.MustParseAddr(a), Port: 80, Ready: ready, Serving: true, Terminating: !ready, Local: true}
	}
	ports := func(hcPort uint16) []svcmodel.ServicePort {
		return []svcmodel.ServicePort{
			{Name: name("http"), Family: svcmodel.IPv4, HealthCheckNodePort: hcPort, LocalEndpoints: []svcmodel.Endpoint{ep("10.0.0.1", true), ep("10.0.0.2", false)}},
			{Name: name("https"), Family: svcmodel.IPv4, HealthCheckNodePort: hcPort, LocalEndpoints: []svcmodel.Endpoint{ep("10.0.0.1", true), ep("10.0.0.3", true)}},
		}
	}
	ask := func(port uint16, path string) (int, map[string]any, error) {
		t.Helper()
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var body map[string]any
		if err := json.Unmarshal(b, &body); err != nil {
			t.Fatalf("body %q: %v", b, err)
		}
		return resp.StatusCode, body, nil
	}
	if err := hc.Sync(&svcmodel.Snapshot{Ports: ports(port)}, lo, false); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/", "/healthz"} {
		if code, body, err := ask(port, path); err != nil || code != http.StatusOK || body["localEndpoints"] != 2.0 {
			t.Errorf("GET %s: %d %v (%v), want 200 with localEndpoints 2 (10.0.0.1 once, 10.0.0.3; not the terminating 10.0.0.2)", path, code, body, err)
		}
	}
	if err := hc.Sync(&svcmodel.Snapshot{Ports: ports(moved)}, lo, false); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ask(port, "/"); err == nil {
		t.Errorf("the health check node port changed, the old port %d still answers", port)
	}
	if code, body, err := ask(moved, "/"); err != nil || code != http.StatusOK || body["localEndpoints"] != 2.0 {
		t.Errorf("the new health check node port: %d %v (%v), want 200 with localEndpoints 2", code, body, err)
	}
}
