package main

import (
	"fmt"
	"net/netip"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/cnibox/cnibox/test/internal/benchnode"
)

// The configurations through a Service (issue 63 item 3): each of pods b
// (node 0) and c (node 1) is the one endpoint of a NodePort Service of
// its own, port servicePort to netload's port, without a selector and
// with an EndpointSlice the bench writes (no endpoint controller runs:
// the slice is what one would write for a Running, Ready pod). The
// ClusterIP pairs start in pod a (node 0); the NodePort pairs in a
// namespace off the cluster on the underlay (10.77.<seq>.9), to node 0's
// address: to b the NodePort's endpoint is on the node it came in at, to c
// it is across the overlay (both proxies masquerade it: it comes from
// outside the pods' network).
const servicePort = 80

// startKubeProxy runs kube-proxy v1.34.2 in nftables mode in n's
// namespace, as its DaemonSet runs it on a node (the node's name, the
// pods' network), against the bench's API server. It execs nft inside that
// namespace, so its tables are the node namespace's; the conntrack
// settings are left alone (0: kube-proxy writes none of those sysctls),
// its health and metrics on the namespace's own loopback.
func (in *instance) startKubeProxy(n *node) error {
	p, err := benchnode.Start(benchnode.StartOpts{Bin: in.e.o.kubeProxy, NS: n.Path, Log: filepath.Join(n.dir, "kube-proxy.log"),
		Args: []string{"--kubeconfig=" + in.e.kc, "--hostname-override=" + n.name, "--proxy-mode=nftables",
			"--cluster-cidr=" + clusterCIDR, "--conntrack-max-per-core=0", "--conntrack-min=0",
			"--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0",
			"--conntrack-udp-timeout=0", "--conntrack-udp-timeout-stream=0",
			"--metrics-bind-address=127.0.0.1:10249", "--healthz-bind-address=127.0.0.1:10256"}})
	if err != nil {
		return fmt.Errorf("kube-proxy: %w", err)
	}
	n.proxy = p
	in.procs = append(in.procs, p)
	return nil
}

// cniboxProxyArgs are the agent's flags that turn its Services proxy on,
// with the conntrack timeouts left alone as kube-proxy's are here.
var cniboxProxyArgs = []string{"--service-proxy", "--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0"}

// service is one Service made for a pod: its ClusterIP and NodePort.
type service struct {
	clusterIP netip.Addr
	nodePort  uint16
}

// addService creates a NodePort Service name whose one endpoint is the
// pod at ip on node n, netload's port behind servicePort.
func (in *instance) addService(name string, ip netip.Addr, n *node) (service, error) {
	e := in.e
	svc, err := e.cs.CoreV1().Services(in.kubeNS).Create(e.ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{
			Name: "rr", Protocol: corev1.ProtocolTCP, Port: servicePort, TargetPort: intstr.FromInt32(loadPort)}}}},
		metav1.CreateOptions{})
	if err != nil {
		return service{}, fmt.Errorf("create Service %s: %w", name, err)
	}
	ready, serving, terminating := true, true, false
	portName, proto, port := "rr", corev1.ProtocolTCP, int32(loadPort)
	nodeName := n.name
	_, err = e.cs.DiscoveryV1().EndpointSlices(in.kubeNS).Create(e.ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{ip.String()}, NodeName: &nodeName,
			Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating}}},
		Ports: []discoveryv1.EndpointPort{{Name: &portName, Protocol: &proto, Port: &port}},
	}, metav1.CreateOptions{})
	if err != nil {
		return service{}, fmt.Errorf("create the EndpointSlice of %s: %w", name, err)
	}
	cip, err := netip.ParseAddr(svc.Spec.ClusterIP)
	if err != nil {
		return service{}, fmt.Errorf("the ClusterIP %q of Service %s: %w", svc.Spec.ClusterIP, name, err)
	}
	return service{clusterIP: cip, nodePort: uint16(svc.Spec.Ports[0].NodePort)}, nil
}

// newClient makes the client off the cluster: a namespace on the
// underlay, 10.77.<seq>.9, with no agent.
func (in *instance) newClient() (string, error) {
	veth := fmt.Sprintf("dp%dx", in.seq)
	ns, err := benchnode.NewNS(in.nsName("x"), benchnode.Wire{Host: in.e.h, HostVeth: veth, Bridge: underlayBridge,
		Addr: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 77, byte(in.seq), 9}), 16)})
	if ns == nil {
		return "", err
	}
	in.nss = append(in.nss, ns.Name)
	in.veths = append(in.veths, veth)
	ns.H.Close()
	ns.H = nil
	return ns.Path, err
}

// servicePairs makes the two Services (pod b's, pod c's) and the client
// off the cluster, and returns the four pairs through them once each
// answers (the proxy has programmed it).
func (in *instance) servicePairs(paths map[string]string, pods map[string]netip.Addr) ([]pair, error) {
	sb, err := in.addService("dp-b", pods["b"], in.nodes[0])
	if err != nil {
		return nil, err
	}
	sc, err := in.addService("dp-c", pods["c"], in.nodes[1])
	if err != nil {
		return nil, err
	}
	ext, err := in.newClient()
	if err != nil {
		return nil, fmt.Errorf("the client off the cluster: %w", err)
	}
	n0 := in.nodes[0].ip
	in.logf("Services: dp-b %s:%d, NodePort %d; dp-c %s:%d, NodePort %d (node 0 %s)",
		sb.clusterIP, servicePort, sb.nodePort, sc.clusterIP, servicePort, sc.nodePort, n0)
	pairs := []pair{
		{kind: sameNodeClusterIP, cli: paths["a"], srv: paths["b"], ip: sb.clusterIP, port: servicePort},
		{kind: crossNodeClusterIP, cli: paths["a"], srv: paths["c"], ip: sc.clusterIP, port: servicePort},
		{kind: sameNodeNodePort, cli: ext, srv: paths["b"], ip: n0, port: sb.nodePort},
		{kind: crossNodeNodePort, cli: ext, srv: paths["c"], ip: n0, port: sc.nodePort},
	}
	for _, p := range pairs {
		if err := in.reach(p.cli, p.ip, p.port); err != nil {
			return nil, fmt.Errorf("%s: %w\n%s", p.kind, err, in.proxyLogs())
		}
	}
	in.logf("Services programmed")
	return pairs, nil
}

// proxyLogs is the tail of each node's proxy's log (the agent's for
// cnibox's), for an error.
func (in *instance) proxyLogs() string {
	var s string
	for _, n := range in.nodes {
		p := n.proxy
		if p == nil {
			p = n.agent
		}
		if p != nil {
			s += fmt.Sprintf("%s's %s:\n%s\n", n.name, filepath.Base(p.Cmd.Path), p.LogTail(1500))
		}
	}
	return s
}
