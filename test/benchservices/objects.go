package main

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The API objects: Service i is "s-i" in namespace benchNS with the
// ClusterIP benchIP(i) (given, not allocated: the harness knows what to
// look for before the API answers), one TCP port 80 -> 8080 and no
// selector; its EndpointSlice "s-i" holds four ready endpoints,
// endpointIP(i, 0..3), with no pods behind them (nothing sends traffic).
// Sample k of the one-change measurement is "x-k" with sampleIP(k).
const (
	benchNS      = "svcbench"
	endpointsPer = 4
	servicePort  = 80
	targetPort   = 8080
	managedBy    = "cnibox-bench-services"
	sampleLabel  = "bench-services-sample"
	serviceCIDR  = "10.96.0.0/12" // the API server's (KCP_SERVICE_CIDR)
	clusterCIDR  = "10.128.0.0/9" // the endpoints' and the node's pod CIDR
	maxServices  = 1 << 18
	maxSamples   = 1 << 16
)

var (
	// benchPrefix holds the bench Services' ClusterIPs: a map element of
	// an address in it is one of them (the kubernetes Service, 10.96.0.1,
	// and the samples are not).
	benchPrefix  = netip.MustParsePrefix("10.100.0.0/14")
	samplePrefix = netip.MustParsePrefix("10.104.0.0/16")
)

// addrPlus is the address n after the start of p (IPv4).
func addrPlus(p netip.Prefix, n uint32) netip.Addr {
	b := p.Addr().As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += n
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// benchIP is Service i's ClusterIP.
func benchIP(i int) netip.Addr { return addrPlus(benchPrefix, uint32(i)) }

// sampleIP is sample k's ClusterIP.
func sampleIP(k int) netip.Addr { return addrPlus(samplePrefix, uint32(k)) }

// endpointIP is endpoint j of object o (o = i for Service i, maxServices
// + k for sample k).
func endpointIP(o, j int) netip.Addr {
	return addrPlus(netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 128, 0, 0}), 9), uint32(o*endpointsPer+j))
}

func serviceName(i int) string { return fmt.Sprintf("s-%d", i) }
func sampleName(k int) string  { return fmt.Sprintf("x-%d", k) }

// service is a ClusterIP Service named name at ip with one TCP port.
func service(name string, ip netip.Addr, labels map[string]string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: benchNS, Labels: labels},
		Spec: corev1.ServiceSpec{
			Type:      corev1.ServiceTypeClusterIP,
			ClusterIP: ip.String(), ClusterIPs: []string{ip.String()},
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: servicePort, TargetPort: intstr.FromInt32(targetPort)}},
		},
	}
}

// slice is the EndpointSlice of Service name: endpointsPer ready
// endpoints of object o.
func slice(name string, o int, labels map[string]string) *discoveryv1.EndpointSlice {
	l := map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: managedBy}
	for k, v := range labels {
		l[k] = v
	}
	ready := true
	eps := make([]discoveryv1.Endpoint, endpointsPer)
	for j := range eps {
		eps[j] = discoveryv1.Endpoint{
			Addresses:  []string{endpointIP(o, j).String()},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &ready},
		}
	}
	pname, proto, port := "http", corev1.ProtocolTCP, int32(targetPort)
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: benchNS, Labels: l},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   eps,
		Ports:       []discoveryv1.EndpointPort{{Name: &pname, Protocol: &proto, Port: &port}},
	}
}
