package nft

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/cnibox/cnibox/internal/svcmodel"
)

func svcEP(a string, port uint16) svcmodel.Endpoint {
	return svcmodel.Endpoint{Addr: netip.MustParseAddr(a), Port: port, Ready: true, Serving: true}
}

func svcFE(k svcmodel.Kind, a string, port uint16, f svcmodel.Family) svcmodel.Frontend {
	fe := svcmodel.Frontend{Kind: k, Family: f, Port: port}
	if a != "" {
		fe.Addr = netip.MustParseAddr(a)
	}
	return fe
}

func svcName(ns, name, port string) svcmodel.PortName {
	return svcmodel.PortName{Namespace: ns, Name: name, Port: port}
}

// traceSnap is a snapshot with every kind of ServicePort the table
// renders differently.
func traceSnap() *svcmodel.Snapshot {
	v4, v6 := svcmodel.IPv4, svcmodel.IPv6
	web := []svcmodel.Endpoint{svcEP("10.1.0.2", 8080), svcEP("10.1.0.3", 8080), svcEP("10.1.1.2", 8080)}
	web6 := []svcmodel.Endpoint{svcEP("fd01::2", 8080), svcEP("fd01:0:0:1::2", 8080)}
	var many []svcmodel.Endpoint
	for i := range 9 {
		many = append(many, svcEP(fmt.Sprintf("10.1.%d.7", i), 9000))
	}
	return &svcmodel.Snapshot{
		NodePortAddrs: []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")},
		ClusterCIDRs:  []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("fd01::/48")},
		ServiceCIDRs:  []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("fd96::/112")},
		Ports: []svcmodel.ServicePort{
			{Name: svcName("a", "web", "http"), Family: v4, Protocol: svcmodel.TCP,
				Frontends: []svcmodel.Frontend{svcFE(svcmodel.ClusterIP, "10.96.0.10", 80, v4), svcFE(svcmodel.NodePort, "", 30080, v4),
					svcFE(svcmodel.LoadBalancer, "198.51.100.7", 80, v4)},
				ClusterEndpoints: web, LocalEndpoints: web[:2], HasEndpoints: true, ExternalLocal: true,
				SourceRanges: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("10.1.0.0/16")}},
			{Name: svcName("a", "web", "http"), Family: v6, Protocol: svcmodel.TCP,
				Frontends:        []svcmodel.Frontend{svcFE(svcmodel.ClusterIP, "fd96::10", 80, v6), svcFE(svcmodel.NodePort, "", 30080, v6)},
				ClusterEndpoints: web6, LocalEndpoints: web6[:1], HasEndpoints: true},
			{Name: svcName("kube-system", "dns", "dns"), Family: v6, Protocol: svcmodel.UDP,
				Frontends:        []svcmodel.Frontend{svcFE(svcmodel.ClusterIP, "fd96::a", 53, v6), svcFE(svcmodel.NodePort, "", 30053, v6)},
				ClusterEndpoints: []svcmodel.Endpoint{svcEP("fd01::5", 53), svcEP("fd01::6", 53)}, HasEndpoints: true,
				AffinityTimeout: 3 * time.Hour},
			{Name: svcName("a", "none", ""), Family: v4, Protocol: svcmodel.UDP,
				Frontends: []svcmodel.Frontend{svcFE(svcmodel.ClusterIP, "10.96.0.11", 53, v4), svcFE(svcmodel.NodePort, "", 30054, v4)}},
			{Name: svcName("a", "local", ""), Family: v4, Protocol: svcmodel.TCP,
				Frontends:        []svcmodel.Frontend{svcFE(svcmodel.ClusterIP, "10.96.0.12", 80, v4), svcFE(svcmodel.ExternalIP, "198.51.100.8", 80, v4)},
				ClusterEndpoints: web[2:], HasEndpoints: true, InternalLocal: true, ExternalLocal: true},
			{Name: svcName("a", "one", "s"), Family: v4, Protocol: svcmodel.SCTP,
				Frontends:        []svcmodel.Frontend{svcFE(svcmodel.ClusterIP, "10.96.0.13", 9, v4), svcFE(svcmodel.ExternalIP, "198.51.100.9", 9, v4)},
				ClusterEndpoints: web[:1], HasEndpoints: true},
			{Name: svcName("a", "many", ""), Family: v4, Protocol: svcmodel.TCP,
				Frontends:        []svcmodel.Frontend{svcFE(svcmodel.ClusterIP, "10.96.0.14", 90, v4)},
				ClusterEndpoints: many, HasEndpoints: true, AffinityTimeout: time.Minute},
		},
	}
}
