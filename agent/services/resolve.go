package services

import (
	"cmp"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/cnibox/cnibox/agent/cluster"
	"github.com/cnibox/cnibox/internal/svcmodel"
)

// Node is what the resolution reads of this node: its name (an endpoint
// of it is local) and its zone label (topology.kubernetes.io/zone, for
// zone hints).
type Node struct {
	Name, Zone string
}

// resolveService is the ports svc serves, one per port per family of its
// cluster IPs, from its EndpointSlices, as kube-proxy's service and
// endpoints change trackers and CategorizeEndpoints make them (sorted by
// port name, then family). A Service the proxy skips (headless,
// ExternalName, no cluster IP) serves none.
func resolveService(svc *cluster.Service, eps []*cluster.EndpointSlice, node Node) []svcmodel.ServicePort {
	if svc == nil || svc.Skip {
		return nil
	}
	var out []svcmodel.ServicePort
	for _, sp := range svc.Ports {
		for _, cip := range svc.ClusterIPs {
			out = append(out, resolvePort(svc, sp, cip, eps, node))
		}
	}
	slices.SortFunc(out, func(a, b svcmodel.ServicePort) int {
		return cmp.Or(cmp.Compare(a.Name.Port, b.Name.Port), cmp.Compare(a.Family, b.Family))
	})
	return out
}

// resolvePort is sp of svc in the family of clusterIP.
func resolvePort(svc *cluster.Service, sp cluster.ServicePort, clusterIP netip.Addr, eps []*cluster.EndpointSlice, node Node) svcmodel.ServicePort {
	fam := svcmodel.FamilyOf(clusterIP)
	out := svcmodel.ServicePort{
		Name:          svcmodel.PortName{Namespace: svc.Namespace, Name: svc.Name, Port: sp.Name},
		Family:        fam,
		Protocol:      svcmodel.Proto(sp.Protocol),
		ExternalLocal: svc.ExternalLocal,
		InternalLocal: svc.InternalLocal,
	}
	out.Frontends = append(out.Frontends, svcmodel.Frontend{Kind: svcmodel.ClusterIP, Addr: clusterIP, Family: fam, Port: sp.Port})
	if sp.NodePort != 0 {
		out.Frontends = append(out.Frontends, svcmodel.Frontend{Kind: svcmodel.NodePort, Family: fam, Port: sp.NodePort})
	}
	for _, a := range svc.ExternalIPs {
		if svcmodel.FamilyOf(a) == fam {
			out.Frontends = append(out.Frontends, svcmodel.Frontend{Kind: svcmodel.ExternalIP, Addr: a, Family: fam, Port: sp.Port})
		}
	}
	for _, a := range svc.LoadBalancerIPs {
		if svcmodel.FamilyOf(a) == fam {
			out.Frontends = append(out.Frontends, svcmodel.Frontend{Kind: svcmodel.LoadBalancer, Addr: a, Family: fam, Port: sp.Port})
		}
	}
	for _, r := range svc.SourceRanges {
		if svcmodel.FamilyOf(r.Addr()) == fam {
			out.SourceRanges = append(out.SourceRanges, r)
		}
	}
	if svc.AffinitySeconds > 0 {
		out.AffinityTimeout = time.Duration(svc.AffinitySeconds) * time.Second
	}
	out.HealthCheckNodePort = svc.HealthCheckNodePort
	// kube-proxy's ExternallyAccessible, per family: a frontend other
	// than the cluster IP.
	external := len(out.Frontends) > 1
	usesCluster := !svc.InternalLocal || external
	usesLocal := svc.InternalLocal || (svc.ExternalLocal && external)
	all := endpointsOf(svc, sp, fam, eps, node)
	out.ClusterEndpoints, out.LocalEndpoints, out.HasEndpoints = categorize(all, usesCluster, usesLocal, node)
	return out
}

// endpoint is an endpoint of a port with its hints, which the choice
// reads and the vocabulary does not carry.
type endpoint struct {
	svcmodel.Endpoint
	zoneHints, nodeHints []string
}

// endpointsOf are the endpoints of svc's port sp in family fam, from the
// slices' ports of the same name and protocol; an address in several
// slices counts once (the local one if they differ, as kube-proxy), sorted
// by address and port.
func endpointsOf(svc *cluster.Service, sp cluster.ServicePort, fam svcmodel.Family, eps []*cluster.EndpointSlice, node Node) []endpoint {
	want := discoveryv1.AddressTypeIPv4
	if fam == svcmodel.IPv6 {
		want = discoveryv1.AddressTypeIPv6
	}
	proto := sp.Protocol
	if proto == "" {
		proto = corev1.ProtocolTCP
	}
	var out []endpoint
	seen := map[netip.AddrPort]int{}
	for _, s := range eps {
		if s.Namespace != svc.Namespace || s.Service != svc.Name || s.AddressType != want {
			continue
		}
		for _, p := range s.Ports {
			if p.Name != sp.Name || p.Protocol != proto {
				continue
			}
			for _, e := range s.Endpoints {
				if svcmodel.FamilyOf(e.Addr) != fam {
					continue
				}
				local := node.Name != "" && e.Node == node.Name
				ep := endpoint{Endpoint: svcmodel.Endpoint{Addr: e.Addr, Port: p.Port, Ready: e.Ready, Serving: e.Serving,
					Terminating: e.Terminating, NodeName: e.Node, Local: local, Zone: e.Zone},
					zoneHints: e.ZoneHints, nodeHints: e.NodeHints}
				key := netip.AddrPortFrom(e.Addr, p.Port)
				if i, ok := seen[key]; ok {
					if local {
						out[i] = ep
					}
					continue
				}
				seen[key] = len(out)
				out = append(out, ep)
			}
		}
	}
	slices.SortFunc(out, func(a, b endpoint) int {
		return cmp.Or(a.Addr.Compare(b.Addr), cmp.Compare(a.Port, b.Port))
	})
	return out
}
