package svcmodel

import (
	"net/netip"
	"testing"
)

// TestFrontendOf: a ClusterIP, an external IP and a NodePort on a
// NodePort address name their Service port, of the protocol and family
// asked; another port, protocol or address names none.
func TestFrontendOf(t *testing.T) {
	web := PortName{Namespace: "a", Name: "web", Port: "http"}
	dns := PortName{Namespace: "kube-system", Name: "dns", Port: "dns"}
	s := &Snapshot{
		NodePortAddrs: []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")},
		Ports: []ServicePort{
			{Name: web, Family: IPv4, Protocol: TCP, Frontends: []Frontend{
				{Kind: ClusterIP, Addr: netip.MustParseAddr("10.96.0.10"), Family: IPv4, Port: 80},
				{Kind: ExternalIP, Addr: netip.MustParseAddr("198.51.100.7"), Family: IPv4, Port: 80},
				{Kind: NodePort, Family: IPv4, Port: 30080}}},
			{Name: web, Family: IPv6, Protocol: TCP, Frontends: []Frontend{{Kind: NodePort, Family: IPv6, Port: 30080}}},
			{Name: dns, Family: IPv4, Protocol: UDP, Frontends: []Frontend{{Kind: ClusterIP, Addr: netip.MustParseAddr("10.96.0.10"), Family: IPv4, Port: 53}}},
		},
	}
	for _, c := range []struct {
		proto Proto
		dst   string
		want  PortName
		ok    bool
	}{
		{TCP, "10.96.0.10:80", web, true},
		{TCP, "198.51.100.7:80", web, true},
		{TCP, "192.0.2.10:30080", web, true},
		{TCP, "[2001:db8::10]:30080", web, true},
		{UDP, "10.96.0.10:53", dns, true},
		{TCP, "10.96.0.10:53", PortName{}, false},
		{UDP, "10.96.0.10:80", PortName{}, false},
		{TCP, "10.96.0.11:80", PortName{}, false},
		{TCP, "192.0.2.11:30080", PortName{}, false},
	} {
		got, ok := s.FrontendOf(c.proto, netip.MustParseAddrPort(c.dst))
		if got != c.want || ok != c.ok {
			t.Errorf("FrontendOf(%s, %s) = %v, %v; want %v, %v", c.proto, c.dst, got, ok, c.want, c.ok)
		}
	}
	if _, ok := (*Snapshot)(nil).FrontendOf(TCP, netip.MustParseAddrPort("10.96.0.10:80")); ok {
		t.Error("a nil snapshot names a Service")
	}
}
