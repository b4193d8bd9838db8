//go:build !nokube

package services

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibox/cnibox/agent/cluster"
	"github.com/cnibox/cnibox/internal/svcmodel"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// The data path of the proxy end to end, in namespaces (root): API
// objects go in through the watcher's handlers (as the informers call
// them), the syncer writes the services table into a "node" namespace,
// and real connections go through it. What a user sees of a Service is
// checked: which backend answers, with which client address, what is
// dropped or refused, what the health check node port answers.
//
//	client (192.168.99.2, fd00:98::2, fd00:97::2; off the cluster)
//	  | vc: 192.168.99.1/24, fd00:98::1/64 (the Node's InternalIPs), fd00:97::1/64
//	node (the table, the health checks)
//	  | va: 10.1.1.1/24, fd01:1::1/64      | vb: 10.1.2.1/24, fd01:2::1/64
//	backend A (10.1.1.2, fd01:1::2)        backend B (10.1.2.2, fd01:2::2)
//
// Every backend is routed through the node, so its answers pass the
// node's conntrack whatever the client.

const labNode, labZone = "node-a", "zone-a"

// dataLab is the lab above with the proxy running in the node.
type dataLab struct {
	node, client *netops.Handle
	w            *watch
	synced       chan *svcmodel.Snapshot
}

func labOpen(t *testing.T, prefix string) *netops.Handle {
	t.Helper()
	h, err := netops.Open(nstest.NewNS(t, prefix))
	labMust(t, err)
	t.Cleanup(func() { h.Close() })
	return h
}

func labMust(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// link joins the node and peer with a veth (node end name) and gives both
// ends their addresses: the node's the ".1"/"::1" of each prefix, the
// peer's the ".2"/"::2", its routes through the node.
func link(t *testing.T, node, peer *netops.Handle, name string, prefixes ...string) {
	t.Helper()
	_, _, err := node.EnsureVeth(netops.VethOpts{HostName: name, PeerName: "eth0", Peer: peer})
	labMust(t, err)
	gw := map[bool]bool{}
	for _, s := range prefixes {
		p := netip.MustParsePrefix(s)
		a1, a2 := p.Addr().Next(), p.Addr().Next().Next()
		labMust(t, node.EnsureAddr(name, netip.PrefixFrom(a1, p.Bits()), netops.AddrOpts{NoDAD: true}))
		labMust(t, peer.EnsureAddr("eth0", netip.PrefixFrom(a2, p.Bits()), netops.AddrOpts{NoDAD: true}))
		if !gw[a1.Is4()] {
			gw[a1.Is4()] = true
			labMust(t, peer.EnsureRoute(netops.Route{GW: a1, Dev: "eth0"}))
		}
	}
}

// answer serves TCP 8080 on each of addrs in the namespace: each
// connection is answered "NAME CLIENT" (the backend's name, the client
// address it sees) and closed.
func answer(t *testing.T, h *netops.Handle, name string, addrs ...string) {
	for _, a := range addrs {
		var ln net.Listener
		labMust(t, nstest.Run(t, h.Path(), func() (err error) {
			ln, err = net.Listen("tcp", netip.AddrPortFrom(netip.MustParseAddr(a), 8080).String())
			return err
		}))
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				ap := netip.MustParseAddrPort(c.RemoteAddr().String())
				_, _ = fmt.Fprintf(c, "%s %s", name, ap.Addr().Unmap())
				c.Close()
			}
		}()
	}
}

// newDataLab builds the lab and runs the proxy in the node with
// --nodeport-addresses npa and the pods' networks 10.1.0.0/16 and
// fd01::/32, for this node, named node-a in zone-a with the InternalIPs
// 192.168.99.1 and fd00:98::1; the syncer (and so the health checks it
// opens) runs in the node's namespace, as the agent runs in the node's.
func newDataLab(t *testing.T, npa string) *dataLab {
	l := &dataLab{node: labOpen(t, "svn"), client: labOpen(t, "svc"), synced: make(chan *svcmodel.Snapshot, 64)}
	a, b := labOpen(t, "sva"), labOpen(t, "svb")
	link(t, l.node, l.client, "vc", "192.168.99.0/24", "fd00:98::/64", "fd00:97::/64")
	link(t, l.node, a, "va", "10.1.1.0/24", "fd01:1::/64")
	link(t, l.node, b, "vb", "10.1.2.0/24", "fd01:2::/64")
	for _, h := range []*netops.Handle{l.node, l.client, a, b} {
		nstest.WaitLinksUp(t, h.Path()) // (a veth sends nothing before the link watch sees its carrier)
	}
	nstest.WaitIPv6LinkLocal(t, l.node.Path(), "vc", "va", "vb") // (it forwards IPv6)
	labMust(t, l.node.SetSysctls(netops.SysctlSetting{Key: "net.ipv4.ip_forward", Value: "1"},
		netops.SysctlSetting{Key: "net.ipv6.conf.all.forwarding", Value: "1"}))
	answer(t, a, "A", "10.1.1.2", "fd01:1::2")
	answer(t, b, "B", "10.1.2.2", "fd01:2::2")

	nodePorts, err := ParseNodePortAddresses(npa)
	labMust(t, err)
	health := NewProxyHealth(time.Minute)
	l.w = &watch{node: labNode, cfg: WatchConfig{NodePorts: nodePorts, Health: health,
		IfaceAddrs: func() ([]netip.Addr, error) { // (as cnibox-agent's ifaceAddrs)
			ps, err := l.node.Addrs("")
			var out []netip.Addr
			for _, p := range ps {
				out = append(out, p.Addr())
			}
			return out, err
		}}}
	var s *Syncer
	l.w.state = NewState(func() { s.Trigger() })
	hc := &HealthChecks{Healthy: health.Healthy}
	t.Cleanup(hc.Close)
	table := nft.NewServices(l.node.NFT(), nft.ServicesOptions{})
	t.Cleanup(func() { table.Delete() })
	s = NewSyncer(Config{Table: table, State: l.w.state, NodePortAddrs: l.w.nodePortAddrs, Health: health, HealthChecks: hc,
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("fd01::/32")},
		Synced:       func(snap *svcmodel.Snapshot, _ bool) { l.synced <- snap }})
	l.w.setNode(cluster.NodeFromAPI(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: labNode,
		Labels: map[string]string{corev1.LabelTopologyZone: labZone}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.99.1"},
			{Type: corev1.NodeInternalIP, Address: "fd00:98::1"}, {Type: corev1.NodeHostName, Address: labNode}}}}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = nstest.Run(t, l.node.Path(), func() error { return s.Run(ctx) })
	}()
	t.Cleanup(func() { cancel(); <-done })
	return l
}

// set hands objects to the watcher as the informers do.
func (l *dataLab) set(objs ...any) {
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Service:
			l.w.setService(cluster.ServiceFromAPI(o))
		case *discoveryv1.EndpointSlice:
			l.w.setSlice(cluster.EndpointSliceFromAPI(o))
		}
	}
}

// until waits for a sync whose snapshot ok accepts (the health checks
// are synced before it is reported).
func (l *dataLab) until(t *testing.T, what string, ok func(*svcmodel.Snapshot) bool) {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case snap := <-l.synced:
			if ok(snap) {
				return
			}
		case <-timeout:
			t.Fatalf("no sync with %s within a minute", what)
		}
	}
}

// portOf is the port of the Service ns/name of family f in snap.
func portOf(snap *svcmodel.Snapshot, name string, f svcmodel.Family) (svcmodel.ServicePort, bool) {
	for _, p := range snap.Flat() {
		if p.Name.Name == name && p.Family == f {
			return p, true
		}
	}
	return svcmodel.ServicePort{}, false
}

// ask connects from the client to to and returns the answer "NAME
// CLIENT", or why it could not connect within 2 s (what is dropped times
// out; what is refused fails at once).
func (l *dataLab) ask(t *testing.T, to string) (string, error) {
	t.Helper()
	var c net.Conn
	if err := nstest.Run(t, l.client.Path(), func() (err error) {
		c, err = net.DialTimeout("tcp", to, 2*time.Second)
		return err
	}); err != nil {
		return "", err
	}
	defer c.Close()
	labMust(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	b, err := io.ReadAll(c)
	return string(b), err
}

// backends counts the backends that answer n connections to to.
func (l *dataLab) backends(t *testing.T, to string, n int) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for range n {
		got, err := l.ask(t, to)
		if err != nil {
			t.Fatalf("connect to %s: %v", to, err)
		}
		seen[strings.Fields(got)[0]]++
	}
	return seen
}

// timedOut reports whether err is a connection attempt that timed out
// (the SYN dropped).
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// health asks the health check at to from the client: the status and
// the body.
func (l *dataLab) health(t *testing.T, to string) (int, map[string]any, error) {
	t.Helper()
	var c net.Conn
	if err := nstest.Run(t, l.client.Path(), func() (err error) {
		c, err = net.DialTimeout("tcp", to, 2*time.Second)
		return err
	}); err != nil {
		return 0, nil, err
	}
	defer c.Close()
	labMust(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	req, _ := http.NewRequest(http.MethodGet, "http://"+to+"/", nil)
	labMust(t, req.Write(c))
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var body map[string]any
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &body); err != nil {
		return resp.StatusCode, nil, fmt.Errorf("body %q: %w", b, err)
	}
	return resp.StatusCode, body, nil
}

// v6Slice is an IPv6 EndpointSlice of ns/web with the port "http"
// 8080/TCP.
func v6Slice(name string, eps ...ep) *discoveryv1.EndpointSlice {
	return sliceOf(name, discoveryv1.AddressTypeIPv6, []discoveryv1.EndpointPort{{Name: ptr("http"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(int32(8080))}}, eps...)
}

// TestLabNodePortIPv6: a single-stack IPv6 LoadBalancer Service with
// externalTrafficPolicy Local, its NodePort and its health check node
// port, served on the addresses --nodeport-addresses names, kube-proxy's
// meaning: "primary" is the Node's IPv6 InternalIP (fd00:98::1), not the
// node's other IPv6 address (fd00:97::1); a CIDR names the addresses in
// it. From off the node: the client's address is kept and only this
// node's endpoint serves; the health check answers 200 with
// localEndpoints 1 (kube-proxy's body). This node's endpoint terminating
// (another node's ready): the NodePort drops, the health check answers 503
// with localEndpoints 0, so the load balancer steers away.
func TestLabNodePortIPv6(t *testing.T) {
	for _, c := range []struct {
		npa           string
		served, other string
	}{
		{"primary", "fd00:98::1", "fd00:97::1"},
		{"fd00:97::/64", "fd00:97::1", "fd00:98::1"},
	} {
		t.Run(c.npa, func(t *testing.T) {
			l := newDataLab(t, c.npa)
			web := svc(func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Spec.ClusterIP, s.Spec.ClusterIPs = "fd96::10", []string{"fd96::10"}
				s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
				s.Spec.Ports[0].NodePort = 30700
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Spec.HealthCheckNodePort = 30701
			})
			l.set(web, v6Slice("web-1", ep{addr: "fd01:1::2", node: labNode}, ep{addr: "fd01:2::2", node: "node-b"}))
			l.until(t, "the Service's local endpoint", func(s *svcmodel.Snapshot) bool {
				p, ok := portOf(s, "web", svcmodel.IPv6)
				return ok && len(p.LocalEndpoints) == 1
			})
			served, other := "["+c.served+"]:30700", "["+c.other+"]:30700"
			want := "A " + strings.TrimSuffix(c.served, "1") + "2" // (the client's address on that link)
			for range 6 {
				if got, err := l.ask(t, served); err != nil || got != want {
					t.Fatalf("NodePort %s, policy Local: %q (%v), want %q: this node's backend A, seeing the client's address", served, got, err, want)
				}
			}
			if got, err := l.ask(t, other); !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("NodePort on %s, not named by --nodeport-addresses %s: %q (%v), want refused (not served)", other, c.npa, got, err)
			}
			code, body, err := l.health(t, "["+c.served+"]:30701")
			if err != nil || code != http.StatusOK || body["localEndpoints"] != 1.0 || body["serviceProxyHealthy"] != true ||
				fmt.Sprint(body["service"]) != "map[name:web namespace:ns]" {
				t.Errorf("health check node port with a local endpoint: %d %v (%v), want 200, localEndpoints 1, kube-proxy's body", code, body, err)
			}
			if _, _, err := l.health(t, "["+c.other+"]:30701"); !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("health check node port on %s, not a NodePort address: %v, want refused", c.other, err)
			}

			// The local endpoint terminates (serving): kube-proxy counts
			// ready endpoints only, and uses a terminating one for Local
			// traffic only when no endpoint is ready anywhere... here one
			// is ready elsewhere, so this node has none.
			l.set(v6Slice("web-1", ep{addr: "fd01:1::2", node: labNode, ready: no, serving: yes, term: yes}, ep{addr: "fd01:2::2", node: "node-b"}))
			l.until(t, "no ready local endpoint", func(s *svcmodel.Snapshot) bool {
				p, ok := portOf(s, "web", svcmodel.IPv6)
				return ok && (len(p.LocalEndpoints) == 0 || !p.LocalEndpoints[0].Ready)
			})
			code, body, err = l.health(t, "["+c.served+"]:30701")
			if err != nil || code != http.StatusServiceUnavailable || body["localEndpoints"] != 0.0 {
				t.Errorf("health check node port, the local endpoint terminating: %d %v (%v), want 503, localEndpoints 0", code, body, err)
			}
			// No local endpoint at all: external traffic is dropped.
			l.set(v6Slice("web-1", ep{addr: "fd01:2::2", node: "node-b"}))
			l.until(t, "no local endpoint", func(s *svcmodel.Snapshot) bool {
				p, ok := portOf(s, "web", svcmodel.IPv6)
				return ok && len(p.LocalEndpoints) == 0
			})
			if got, err := l.ask(t, served); !timedOut(err) {
				t.Errorf("NodePort %s, policy Local, no local endpoint: %q (%v), want dropped", served, got, err)
			}
			if code, body, err := l.health(t, "["+c.served+"]:30701"); err != nil || code != http.StatusServiceUnavailable || body["localEndpoints"] != 0.0 {
				t.Errorf("health check node port without a local endpoint: %d %v (%v), want 503, localEndpoints 0", code, body, err)
			}
		})
	}
}

// TestLabTrafficPolicies: internalTrafficPolicy Local and the topology the
// EndpointSlice controller writes for trafficDistribution (hints), end to
// end. internal Local: a client of the ClusterIP reaches only this node's
// endpoint, and none when this node has none (dropped, not sent to
// another node's). PreferSameNode (node hints) and PreferSameZone (zone
// hints): only the endpoint hinted for this node or its zone serves;
// once one ready endpoint lacks a hint, every endpoint does (kube-proxy's
// all or nothing).
func TestLabTrafficPolicies(t *testing.T) {
	l := newDataLab(t, "primary")
	const cip = "10.96.0.10:80"
	local := svc(func(s *corev1.Service) {
		s.Spec.InternalTrafficPolicy = ptr(corev1.ServiceInternalTrafficPolicyLocal)
	})
	l.set(local, slice("web-1", ep{addr: "10.1.1.2", node: labNode}, ep{addr: "10.1.2.2", node: "node-b"}))
	l.until(t, "internal Local's endpoint", func(s *svcmodel.Snapshot) bool {
		p, ok := portOf(s, "web", svcmodel.IPv4)
		return ok && len(p.LocalEndpoints) == 1
	})
	if seen := l.backends(t, cip, 12); seen["A"] != 12 {
		t.Errorf("internalTrafficPolicy Local: 12 connections reached %v, want this node's backend A only", seen)
	}
	l.set(slice("web-1", ep{addr: "10.1.1.2", node: "node-b"}, ep{addr: "10.1.2.2", node: "node-b"}))
	l.until(t, "no local endpoint", func(s *svcmodel.Snapshot) bool {
		p, ok := portOf(s, "web", svcmodel.IPv4)
		return ok && len(p.LocalEndpoints) == 0
	})
	if got, err := l.ask(t, cip); !timedOut(err) {
		t.Errorf("internalTrafficPolicy Local, no local endpoint: %q (%v), want dropped", got, err)
	}

	for _, c := range []struct {
		mode     string
		a, b     ep // backend A (node-a, zone-a) and B (node-b, zone-b) with their hints
		unhinted ep // B without its hint
	}{
		{corev1.ServiceTrafficDistributionPreferSameNode,
			ep{addr: "10.1.1.2", node: labNode, zone: labZone, nodes: []string{labNode}, zones: []string{labZone}},
			ep{addr: "10.1.2.2", node: "node-b", zone: "zone-b", nodes: []string{"node-b"}, zones: []string{"zone-b"}},
			ep{addr: "10.1.2.2", node: "node-b", zone: "zone-b"}},
		{corev1.ServiceTrafficDistributionPreferSameZone,
			ep{addr: "10.1.1.2", node: "node-c", zone: labZone, zones: []string{labZone}},
			ep{addr: "10.1.2.2", node: "node-b", zone: "zone-b", zones: []string{"zone-b"}},
			ep{addr: "10.1.2.2", node: "node-b", zone: "zone-b"}},
	} {
		t.Run(c.mode, func(t *testing.T) {
			l.set(svc(func(s *corev1.Service) { s.Spec.TrafficDistribution = ptr(c.mode) }), slice("web-1", c.a, c.b))
			l.until(t, "the hinted endpoint alone", func(s *svcmodel.Snapshot) bool {
				p, ok := portOf(s, "web", svcmodel.IPv4)
				return ok && len(p.ClusterEndpoints) == 1 && !p.InternalLocal
			})
			if seen := l.backends(t, cip, 12); seen["A"] != 12 {
				t.Errorf("%s: 12 connections reached %v, want backend A (hinted for this node or its zone) only", c.mode, seen)
			}
			l.set(slice("web-1", c.a, c.unhinted))
			l.until(t, "both endpoints", func(s *svcmodel.Snapshot) bool {
				p, ok := portOf(s, "web", svcmodel.IPv4)
				return ok && len(p.ClusterEndpoints) == 2
			})
			if seen := l.backends(t, cip, 24); seen["A"] == 0 || seen["B"] == 0 {
				t.Errorf("%s, an endpoint without a hint: 24 connections reached %v, want both backends", c.mode, seen)
			}
		})
	}
}
