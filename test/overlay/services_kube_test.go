//go:build kube

package overlay

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// TestKubeServiceProxy is the Services proxy end to end (issue 63,
// docs/services.md): the built cnibox-agent with --service-proxy (and the
// pod API alone beside it: no overlay) in a node namespace, reading a real
// API server; a backend namespace with two backends, a and b, each a TCP
// and a UDP server that answer with their name and the client's address
// they see; a pod-like client (inside --cluster-cidr) routed through the
// node. A dual-stack NodePort Service and its EndpointSlices created in
// the API:
//   - the client reaches backend a through the ClusterIPs over TCP and UDP,
//     IPv4 and IPv6, seen with its own address (not masqueraded: it is in
//     the cluster);
//   - a client off the cluster (the test, on the underlay) reaches it
//     through the NodePort on the node's InternalIP, masqueraded to the
//     node (kube-proxy masquerades there);
//   - the slice moved to backend b: a UDP socket the client keeps (a
//     resolver's) gets its next answers from b (the agent deleted the
//     conntrack entry to a, which a's still-answering server would
//     otherwise keep alive), TCP reaches b;
//   - the agent stopped, the kernel keeps serving (the table stays); a new
//     agent takes the table over;
//   - the slice emptied: the ClusterIP refuses (kube-proxy's reject: TCP
//     RST, ICMP port unreachable), not a black hole;
//   - the Service deleted: its ClusterIP leaves the table's service-ips4;
//   - the agent restarted with the pod API alone and --service-proxy=false
//     is up and leaves the table: an agent that does no other kernel work
//     (the Multus-style DaemonSet's, without a capability) leaves it to the
//     node's network daemon. A kernel-owning agent's removal of the table
//     is TestServicesTableLeftToItsOwner's; `cnibox cleanup services` is
//     TestKubeProxyMigration's.
//
// The agent's /healthz and /livez answer 200 once it has synced.
func TestKubeServiceProxy(t *testing.T) {
	c := newCluster(t, 1)
	cs, nodeCfg := c.startControlPlane("KCP_SERVICE_CIDR=10.96.0.0/16,fd00:96::/108")
	n := c.nodes[0]
	ctx := context.Background()
	_, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.ip.String()}}}}, metav1.CreateOptions{})
	must(t, err)

	// The node forwards between the client and the backend.
	nh := openH(t, n.ns)
	must(t, nh.SetSysctls(netops.SysctlSetting{Key: "net.ipv4.ip_forward", Value: "1"},
		netops.SysctlSetting{Key: "net.ipv6.conf.all.forwarding", Value: "1"}))
	backend := nstest.NewNS(t, "svc-be")
	bh := openH(t, backend)
	_, _, err = nh.EnsureVeth(netops.VethOpts{HostName: "svbe", PeerName: "eth0", Peer: bh})
	must(t, err)
	must(t, nh.EnsureAddr("svbe", netip.MustParsePrefix("192.168.79.1/24"), netops.AddrOpts{NoDAD: true}))
	beAddr := netip.MustParseAddr("192.168.79.2")
	beB := netip.MustParseAddr("192.168.79.3")
	must(t, bh.EnsureAddr("eth0", netip.PrefixFrom(beAddr, 24), netops.AddrOpts{NoDAD: true}))
	must(t, bh.EnsureAddr("eth0", netip.PrefixFrom(beB, 24), netops.AddrOpts{NoDAD: true}))
	must(t, bh.EnsureRoute(netops.Route{GW: netip.MustParseAddr("192.168.79.1"), Dev: "eth0"}))
	be6 := netip.MustParseAddr("fd00:79::2")
	must(t, nh.EnsureAddr("svbe", netip.MustParsePrefix("fd00:79::1/64"), netops.AddrOpts{NoDAD: true}))
	must(t, bh.EnsureAddr("eth0", netip.PrefixFrom(be6, 64), netops.AddrOpts{NoDAD: true}))
	must(t, bh.EnsureRoute(netops.Route{GW: netip.MustParseAddr("fd00:79::1"), Dev: "eth0"}))
	client := nstest.NewNS(t, "svc-cl")
	ch := openH(t, client)
	_, _, err = nh.EnsureVeth(netops.VethOpts{HostName: "svcl", PeerName: "eth0", Peer: ch})
	must(t, err)
	must(t, nh.EnsureAddr("svcl", netip.MustParsePrefix("10.244.9.1/24"), netops.AddrOpts{NoDAD: true}))
	podIP := netip.MustParseAddr("10.244.9.10")
	must(t, ch.EnsureAddr("eth0", netip.PrefixFrom(podIP, 24), netops.AddrOpts{NoDAD: true}))
	must(t, ch.EnsureRoute(netops.Route{GW: netip.MustParseAddr("10.244.9.1"), Dev: "eth0"}))
	pod6 := netip.MustParseAddr("fd00:10:244:9::10")
	must(t, nh.EnsureAddr("svcl", netip.MustParsePrefix("fd00:10:244:9::1/64"), netops.AddrOpts{NoDAD: true}))
	must(t, ch.EnsureAddr("eth0", netip.PrefixFrom(pod6, 64), netops.AddrOpts{NoDAD: true}))
	must(t, ch.EnsureRoute(netops.Route{GW: netip.MustParseAddr("fd00:10:244:9::1"), Dev: "eth0"}))
	serveName(t, backend, netip.AddrPortFrom(beAddr, 8080), "backend-a")
	serveName(t, backend, netip.AddrPortFrom(beB, 8080), "backend-b")
	serveName(t, backend, netip.AddrPortFrom(be6, 8080), "backend-a")

	health := netip.AddrPortFrom(n.ip, 9666)
	proxy := true
	c.agentArgs = func(n *node) []string {
		return []string{"--pod-api-only", "--socket", filepath.Join(t.TempDir(), "agent.sock"), "--kubeconfig-file", nodeCfg, "--node-name", n.name,
			fmt.Sprintf("--service-proxy=%t", proxy), "--cluster-cidr", "10.244.0.0/16,fd00:10:244::/56", "--health-addr", health.String()}
	}
	n.startAgent()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent log:\n%s", n.log())
		}
	})
	for _, p := range []string{"/healthz", "/livez"} {
		until(t, "the agent's "+p+" answers 200", func() error { return get200("http://" + health.String() + p) })
	}
	// kube-proxy's own ports, as the e2e spec "should check kube-proxy
	// urls" asks them from the node: /healthz on 10256 with kube-proxy's
	// body, /proxyMode on 10249
	until(t, "kube-proxy's /healthz on the node's 10256 answers with lastUpdated", func() error {
		return getBody(t, n.ns, netip.AddrPortFrom(n.ip, 10256), "/healthz", "lastUpdated")
	})
	until(t, "kube-proxy's /proxyMode on the node's loopback 10249 answers", func() error {
		return getBody(t, n.ns, netip.MustParseAddrPort("127.0.0.1:10249"), "/proxyMode", "nftables")
	})
	// kube-proxy's conntrack timeouts in the node's namespace (the e2e
	// spec "should set TCP CLOSE_WAIT timeout" reads an entry's)
	for key, want := range map[string]string{"net.netfilter.nf_conntrack_tcp_timeout_close_wait": "3600", "net.netfilter.nf_conntrack_tcp_timeout_established": "86400"} {
		if v, err := nh.Sysctl(key); err != nil || v != want {
			t.Errorf("the node's %s = %q (%v), want kube-proxy's %s", key, v, err, want)
		}
	}

	svc, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeNodePort, IPFamilyPolicy: ptr(corev1.IPFamilyPolicyRequireDualStack),
		Ports: []corev1.ServicePort{
			{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)},
			{Name: "udp", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(8080)},
		}}}, metav1.CreateOptions{})
	must(t, err)
	cip := netip.MustParseAddr(svc.Spec.ClusterIP)
	tcpFE, udpFE := netip.AddrPortFrom(cip, 80), netip.AddrPortFrom(cip, 53)
	nodePort := netip.AddrPortFrom(n.ip, uint16(svc.Spec.Ports[0].NodePort))
	ready := true
	endpoint := func(a netip.Addr) []discoveryv1.Endpoint {
		return []discoveryv1.Endpoint{{Addresses: []string{a.String()}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}}
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   endpoint(beAddr),
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr("tcp"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(int32(8080))},
			{Name: ptr("udp"), Protocol: ptr(corev1.ProtocolUDP), Port: ptr(int32(8080))},
		},
	}
	slice6 := slice.DeepCopy()
	slice6.Name, slice6.AddressType, slice6.Endpoints = "web-6", discoveryv1.AddressTypeIPv6, endpoint(be6)
	slice, err = cs.DiscoveryV1().EndpointSlices("default").Create(ctx, slice, metav1.CreateOptions{})
	must(t, err)
	_, err = cs.DiscoveryV1().EndpointSlices("default").Create(ctx, slice6, metav1.CreateOptions{})
	must(t, err)

	// answers: dial's answer is want's.
	answers := func(want string, dial func() (string, error)) func() error {
		return func() error {
			got, err := dial()
			if err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("answered %q, want %q", got, want)
			}
			return nil
		}
	}
	tcp := func(to netip.AddrPort) func() (string, error) {
		return func() (string, error) { return askTCP(t, client, to) }
	}
	udp := func(to netip.AddrPort) func() (string, error) {
		return func() (string, error) { return askUDP(t, client, to) }
	}
	fromPod := "backend-a " + podIP.String()
	until(t, fmt.Sprintf("the client reaches backend a over TCP through ClusterIP %v (answer %q)", tcpFE, fromPod), answers(fromPod, tcp(tcpFE)))
	until(t, fmt.Sprintf("the client reaches backend a over UDP through ClusterIP %v (answer %q)", udpFE, fromPod), answers(fromPod, udp(udpFE)))
	// IPv6, the Service's second family: the same, from the pod's IPv6
	// address.
	if len(svc.Spec.ClusterIPs) != 2 {
		t.Fatalf("Service web has ClusterIPs %v; want an IPv4 and an IPv6 one (KCP_SERVICE_CIDR)", svc.Spec.ClusterIPs)
	}
	cip6 := netip.MustParseAddr(svc.Spec.ClusterIPs[1])
	fromPod6 := "backend-a " + pod6.String()
	until(t, fmt.Sprintf("the client reaches backend a over TCP through ClusterIP [%v]:80 (answer %q)", cip6, fromPod6),
		answers(fromPod6, tcp(netip.AddrPortFrom(cip6, 80))))
	until(t, fmt.Sprintf("the client reaches backend a over UDP through ClusterIP [%v]:53 (answer %q)", cip6, fromPod6),
		answers(fromPod6, udp(netip.AddrPortFrom(cip6, 53))))
	if in, _ := inServiceIPs4(t, n.ns, cip); !in {
		t.Errorf("ClusterIP %v serves but is not in map %s of the shard tables inet %s*", cip, nft.ServiceIPs4, nft.ServicesShardPrefix)
	}
	// From off the cluster through the NodePort: masqueraded to the node's
	// address towards the backend.
	fromNode := "backend-a 192.168.79.1"
	until(t, fmt.Sprintf("the underlay reaches backend a through NodePort %v (answer %q)", nodePort, fromNode), answers(fromNode, func() (string, error) {
		c, err := net.DialTimeout("tcp", nodePort.String(), 2*time.Second)
		if err != nil {
			return "", err
		}
		defer c.Close()
		return readAnswer(c)
	}))

	// The client keeps a UDP socket, as a resolver does; the endpoint moves
	// to backend b.
	var kept net.Conn
	must(t, nstest.Run(t, client, func() (err error) { kept, err = net.Dial("udp", udpFE.String()); return err }))
	defer kept.Close()
	ask := func() (string, error) {
		if _, err := kept.Write([]byte("who")); err != nil {
			return "", err
		}
		return readAnswer(kept)
	}
	until(t, "the kept UDP socket reaches backend a", answers(fromPod, ask))
	slice.Endpoints = endpoint(beB)
	slice, err = cs.DiscoveryV1().EndpointSlices("default").Update(ctx, slice, metav1.UpdateOptions{})
	must(t, err)
	fromPodB := "backend-b " + podIP.String()
	until(t, "TCP reaches backend b once the slice names it", answers(fromPodB, tcp(tcpFE)))
	until(t, "the kept UDP socket reaches backend b once the slice names it (the conntrack entry to a deleted)", answers(fromPodB, ask))

	// The agent stops: the kernel keeps serving from the table it left.
	n.stopAgent()
	if got, err := askTCP(t, client, tcpFE); got != fromPodB {
		t.Errorf("with the agent stopped, TCP through %v answered %q (%v); want %q: the table stays", tcpFE, got, err, fromPodB)
	}
	n.startAgent() // the next agent takes it over: it follows the slice below

	// The endpoint leaves the slice: the Service has none and rejects.
	slice.Endpoints = nil
	_, err = cs.DiscoveryV1().EndpointSlices("default").Update(ctx, slice, metav1.UpdateOptions{})
	must(t, err)
	refused := func(dial func() (string, error)) func() error {
		return func() error {
			got, err := dial()
			if errors.Is(err, syscall.ECONNREFUSED) {
				return nil
			}
			return fmt.Errorf("answered %q, err %v; want connection refused", got, err)
		}
	}
	until(t, fmt.Sprintf("TCP to %v without endpoints is refused (RST)", tcpFE), refused(tcp(tcpFE)))
	until(t, fmt.Sprintf("UDP to %v without endpoints is refused (ICMP port unreachable)", udpFE), refused(udp(udpFE)))

	// The Service deleted: its frontend leaves the table.
	must(t, cs.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{}))
	until(t, fmt.Sprintf("ClusterIP %v leaves map %s", cip, nft.ServiceIPs4), func() error {
		if in, ok := inServiceIPs4(t, n.ns, cip); !ok || in {
			return fmt.Errorf("map there %v, element there %v; want the map without the element", ok, in)
		}
		return nil
	})
	for _, p := range []string{"/healthz", "/livez"} {
		if err := get200("http://" + health.String() + p); err != nil {
			t.Errorf("after the syncs: %v", err)
		}
	}

	// The pod API alone without the proxy: up, and the table left to its
	// owner (startServices decides before /healthz answers).
	n.stopAgent()
	proxy = false
	n.startAgent()
	until(t, "the pod-API-only agent with --service-proxy=false answers /healthz", func() error {
		return get200("http://" + health.String() + "/healthz")
	})
	if _, ok := inServiceIPs4(t, n.ns, cip); !ok {
		t.Errorf("a --pod-api-only agent with --service-proxy=false removed table inet %s; want it left to the node's network daemon", nft.ServicesTable)
	}
}

func ptr[T any](v T) *T { return &v }

// until waits (waitUntil) for ok to return nil; the failure names its
// last error.
func until(t *testing.T, what string, ok func() error) {
	t.Helper()
	waitUntil(t, what, func() (bool, string) {
		if err := ok(); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// serveName answers each TCP connection and each UDP datagram on ap, in
// the namespace at ns, with name and the client's address it sees.
func serveName(t *testing.T, ns string, ap netip.AddrPort, name string) {
	var ln net.Listener
	var pc net.PacketConn
	must(t, nstest.Run(t, ns, func() (err error) {
		if ln, err = net.Listen("tcp", ap.String()); err != nil {
			return err
		}
		pc, err = net.ListenPacket("udp", ap.String())
		return err
	}))
	t.Cleanup(func() { ln.Close(); pc.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, name+" "+c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap().String())
			c.Close()
		}
	}()
	go func() {
		b := make([]byte, 512)
		for {
			_, from, err := pc.ReadFrom(b)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo([]byte(name+" "+from.(*net.UDPAddr).AddrPort().Addr().Unmap().String()), from)
		}
	}()
}

// askTCP connects from the namespace at ns to to and returns what the
// server said.
func askTCP(t *testing.T, ns string, to netip.AddrPort) (string, error) {
	var c net.Conn
	err := nstest.Run(t, ns, func() (err error) { c, err = net.DialTimeout("tcp", to.String(), 2*time.Second); return err })
	if err != nil {
		return "", err
	}
	defer c.Close()
	return readAnswer(c)
}

// askUDP sends a datagram from the namespace at ns to to on a connected
// socket and returns the answer (ECONNREFUSED on an ICMP port unreachable).
func askUDP(t *testing.T, ns string, to netip.AddrPort) (string, error) {
	var c net.Conn
	if err := nstest.Run(t, ns, func() (err error) { c, err = net.Dial("udp", to.String()); return err }); err != nil {
		return "", err
	}
	defer c.Close()
	if _, err := c.Write([]byte("who")); err != nil {
		return "", err
	}
	return readAnswer(c)
}

func readAnswer(c net.Conn) (string, error) {
	if err := c.SetDeadline(time.Now().Add(2 * time.Second)); err != nil {
		return "", err
	}
	b := make([]byte, 512)
	k, err := c.Read(b)
	return string(b[:k]), err
}

// getBody asks GET path of the HTTP server at to from the namespace at ns
// (a node's loopback is reached only from inside) and wants a 200 whose
// body holds want.
func getBody(t *testing.T, ns string, to netip.AddrPort, path, want string) error {
	var c net.Conn
	if err := nstest.Run(t, ns, func() (err error) { c, err = net.DialTimeout("tcp", to.String(), 2*time.Second); return err }); err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, to); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
		return fmt.Errorf("GET %s%s: %s %q, want 200 with %q", to, path, resp.Status, body, want)
	}
	return nil
}

func get200(url string) error {
	cl := http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// inServiceIPs4 reports whether map service-ips4 of the services shard
// tables (inet cnibox-services-00..) in the namespace at ns has an
// element for addr (the key's first four bytes: ipv4_addr . inet_proto
// . inet_service), and whether a shard's map is there at all.
func inServiceIPs4(t *testing.T, ns string, addr netip.Addr) (in, ok bool) {
	t.Helper()
	f, err := os.Open(ns)
	must(t, err)
	defer f.Close()
	conn, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	must(t, err)
	defer conn.CloseLasting()
	a := addr.As4()
	for _, table := range nft.ServicesTables()[1:] {
		set, err := conn.GetSetByName(&nftables.Table{Name: table, Family: nftables.TableFamilyINet}, nft.ServiceIPs4)
		if errors.Is(err, syscall.ENOENT) {
			continue
		}
		must(t, err)
		ok = true
		elems, err := conn.GetSetElements(set)
		must(t, err)
		for _, e := range elems {
			if len(e.Key) >= 4 && [4]byte(e.Key[:4]) == a {
				return true, true
			}
		}
	}
	return false, ok
}
