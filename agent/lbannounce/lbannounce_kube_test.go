//go:build kube

package lbannounce

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/cnibox/cnibox/agent/cluster"
	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/agent/services"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/store"
	"github.com/cnibox/cnibox/test/kube"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The lab: three nodes on a LAN (192.168.77.0/24, a bridge in a namespace
// of its own) and a client outside the cluster on it (192.168.77.100).
// Each node serves TCP port 8080 on every address, answering with its
// name: a connection to a load balancer address says which node's kernel
// took it (the Services proxy's DNAT of that address to the endpoints is
// agent/services' and its tests'). Each node's agent is this test binary
// in a child process (TestLBAnnounceNodeAgent), so that it can be killed.
type lab struct {
	nodes  []*labNode
	client *netops.Handle
	kc     string
	cs     kubernetes.Interface
}

type labNode struct {
	name  string
	h     *netops.Handle
	agent *exec.Cmd
	done  chan struct{}
	log   string
	data  string
	proxy *kube.Proxy // nil: the agent reaches the API server directly
}

const port = 8080

var (
	addrA = netip.MustParseAddr("192.168.77.200")   // pool lb (nodes lb=true), Service a (Cluster)
	addrB = netip.MustParseAddr("192.168.77.210")   // pool any (every node), Service b (Local)
	addrC = netip.MustParseAddr("2001:db8:77::200") // pool v6 (nodes lb=true), Service c (Cluster)
)

func newLab(t *testing.T, kc string, cs kubernetes.Interface) *lab {
	t.Helper()
	open := func(prefix string) *netops.Handle {
		h, err := netops.Open(nstest.NewNS(t, prefix))
		must(t, err)
		t.Cleanup(func() { h.Close() })
		return h
	}
	lan := open("lblan")
	br, err := lan.EnsureBridge(netops.BridgeOpts{Name: "br0"})
	must(t, err)
	l := &lab{kc: kc, cs: cs, client: open("lbext")}
	attach := func(h *netops.Handle, port string, addr, addr6 netip.Prefix) {
		_, _, err := lan.EnsureVeth(netops.VethOpts{HostName: port, PeerName: "eth0", Peer: h, MasterIndex: br.Index})
		must(t, err)
		must(t, h.EnsureAddr("eth0", addr, netops.AddrOpts{}))
		must(t, h.EnsureAddr("eth0", addr6, netops.AddrOpts{NoDAD: true}))
	}
	attach(l.client, "ext", netip.MustParsePrefix("192.168.77.100/24"), netip.MustParsePrefix("2001:db8:77::100/64"))
	for i := 1; i <= 3; i++ {
		n := &labNode{name: fmt.Sprintf("n%d", i), h: open(fmt.Sprintf("lbn%d", i))}
		attach(n.h, n.name, netip.PrefixFrom(netip.AddrFrom4([4]byte{192, 168, 77, byte(10 + i)}), 24),
			netip.MustParsePrefix(fmt.Sprintf("2001:db8:77::%d/64", 10+i)))
		must(t, n.h.SetSysctl("net.ipv4.ip_forward", "1"))
		must(t, n.h.SetSysctl("net.ipv6.conf.all.forwarding", "1"))
		serveName(t, n)
		_, err := n.h.EnsureBridge(netops.BridgeOpts{Name: "cni0"})
		must(t, err)
		must(t, n.h.EnsureAddr("cni0", netip.PrefixFrom(podRange(i).Addr().Next(), 24), netops.AddrOpts{}))
		for j := 1; j <= 3; j++ {
			if j != i {
				must(t, n.h.EnsureRoute(netops.Route{Dst: podRange(j), GW: netip.AddrFrom4([4]byte{192, 168, 77, byte(10 + j)}), Dev: "eth0"}))
			}
		}
		_, err = cs.CoreV1().Nodes().Create(context.Background(), &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: map[string]string{"lb": strconv.FormatBool(i <= 2)}},
		}, metav1.CreateOptions{})
		must(t, err)
		l.nodes = append(l.nodes, n)
	}
	return l
}

func podRange(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(i), 0}), 24)
}

// addPod adds a pod namespace behind node n's bridge at 10.244.N.2 that
// answers each connection with the client's address it sees (nstest.Serve)
// and returns that address and port.
func (l *lab) addPod(t *testing.T, n *labNode) netip.AddrPort {
	t.Helper()
	h, err := netops.Open(nstest.NewNS(t, "lbp"))
	must(t, err)
	t.Cleanup(func() { h.Close() })
	br, err := n.h.LinkByName("cni0")
	must(t, err)
	_, _, err = n.h.EnsureVeth(netops.VethOpts{HostName: "vpod", PeerName: "eth0", Peer: h, MasterIndex: br.Index})
	must(t, err)
	i := slices.Index(l.nodes, n) + 1
	addr := podRange(i).Addr().Next().Next()
	must(t, h.EnsureAddr("eth0", netip.PrefixFrom(addr, 24), netops.AddrOpts{}))
	must(t, h.EnsureRoute(netops.Route{GW: podRange(i).Addr().Next(), Dev: "eth0"}))
	return nstest.Serve(t, h.Path(), addr)
}

// seen is the client address the pod behind addr saw the client's
// connection to addr:80 come from ("" when it could not connect).
func (l *lab) seen(t *testing.T, addr netip.Addr, timeout time.Duration) string {
	var got string
	_ = nstest.Run(t, l.client.Path(), func() error {
		c, err := net.DialTimeout("tcp", netip.AddrPortFrom(addr, 80).String(), timeout)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(timeout))
		b, err := io.ReadAll(c)
		if ap, perr := netip.ParseAddrPort(string(b)); perr == nil {
			got = ap.Addr().Unmap().String()
		}
		return err
	})
	return got
}

// serveName answers each connection to port 8080 of any of n's addresses
// with n's name.
func serveName(t *testing.T, n *labNode) {
	var ln net.Listener
	must(t, nstest.Run(t, n.h.Path(), func() (err error) {
		ln, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
		return err
	}))
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, n.name)
			c.Close()
		}
	}()
}

// answer is the name of the node that answers the client at addr, "" when
// none does within timeout.
func (l *lab) answer(t *testing.T, addr netip.Addr, timeout time.Duration) string {
	var got string
	_ = nstest.Run(t, l.client.Path(), func() error {
		c, err := net.DialTimeout("tcp", netip.AddrPortFrom(addr, port).String(), timeout)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(timeout))
		b, err := io.ReadAll(bufio.NewReader(c))
		got = string(b)
		return err
	})
	return got
}

// holders are the nodes whose uplink has addr.
func (l *lab) holders(t *testing.T, addr netip.Addr) []string {
	var out []string
	for _, n := range l.nodes {
		ps, err := n.h.Addrs("eth0")
		if err != nil {
			t.Errorf("addresses of %s: %v", n.name, err)
			continue
		}
		if slices.Contains(ps, netip.PrefixFrom(addr, addr.BitLen())) {
			out = append(out, n.name)
		}
	}
	return out
}

// waitHolder waits until exactly one node, one of among (any when empty)
// and not not, holds addr and the client reaches that node at it; it
// returns that node.
func (l *lab) waitHolder(t *testing.T, addr netip.Addr, not string, among ...string) *labNode {
	t.Helper()
	var hs []string
	var got string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		hs = l.holders(t, addr)
		if len(hs) != 1 || hs[0] == not || (len(among) > 0 && !slices.Contains(among, hs[0])) {
			continue
		}
		if got = l.answer(t, addr, time.Second); got == hs[0] {
			return l.node(hs[0])
		}
	}
	t.Fatalf("%s: holders %v, the client reaches %q; want one of %v other than %q, reached; the agents record %s", addr, hs, got, among, not, l.recorded(addr))
	return nil
}

// recorded is what each agent recorded of addr (cnibox inspect lb's).
func (l *lab) recorded(addr netip.Addr) string {
	var out []string
	for _, n := range l.nodes {
		s, err := store.OpenWith(store.Dir(n.data), store.Options{NoCreate: true})
		if err != nil {
			out = append(out, n.name+": "+err.Error())
			continue
		}
		st, _, err := s.LB()
		s.Close()
		i := slices.IndexFunc(st.Addresses, func(a store.LBAddress) bool { return a.IP == addr })
		if err != nil || i < 0 {
			out = append(out, fmt.Sprintf("%s: nothing (%v)", n.name, err))
			continue
		}
		out = append(out, fmt.Sprintf("%s: %+v", n.name, st.Addresses[i]))
	}
	return strings.Join(out, "; ")
}

// revive brings a dead node back: its uplink up with its IPv6 address and
// its routes to the other nodes' pods (which the kernel removed with the
// link's going down).
func (l *lab) revive(t *testing.T, n *labNode) {
	t.Helper()
	must(t, n.h.SetLinkUp("eth0"))
	i := slices.Index(l.nodes, n) + 1
	must(t, n.h.EnsureAddr("eth0", netip.MustParsePrefix(fmt.Sprintf("2001:db8:77::%d/64", 10+i)), netops.AddrOpts{NoDAD: true}))
	for j := 1; j <= 3; j++ {
		if j != i {
			must(t, n.h.EnsureRoute(netops.Route{Dst: podRange(j), GW: netip.AddrFrom4([4]byte{192, 168, 77, byte(10 + j)}), Dev: "eth0"}))
		}
	}
}

func (l *lab) node(name string) *labNode {
	return l.nodes[slices.IndexFunc(l.nodes, func(n *labNode) bool { return n.name == name })]
}

// watch checks, every 10 ms until the test ends, that at most one node
// holds addr in its kernel, and, from the LAN (the client), that at most
// one MAC answers an ARP request (a neighbour solicitation) for it.
func (l *lab) watch(t *testing.T, addr netip.Addr) (stop func()) {
	var p nstest.Prober
	if addr.Is4() {
		p = nstest.NewARPProber(t, l.client.Path(), "eth0")
	} else {
		p = nstest.NewNDPProber(t, l.client.Path(), "eth0")
	}
	return nstest.WatchOneHolder(t, p, addr, 10*time.Millisecond, func() []string { return l.holders(t, addr) })
}

func (l *lab) startAgent(t *testing.T, n *labNode) {
	t.Helper()
	n.log, n.data = filepath.Join(t.TempDir(), n.name+".log"), t.TempDir()
	f, err := os.Create(n.log)
	must(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^TestLBAnnounceNodeAgent$", "-test.v")
	cmd.Env = append(os.Environ(), "LB_AGENT_NODE="+n.name, "LB_AGENT_NETNS="+n.h.Path(),
		"LB_AGENT_KUBECONFIG="+l.kc, "LB_AGENT_DATA="+n.data)
	if n.proxy != nil {
		cmd.Env = append(cmd.Env, "LB_AGENT_API=https://"+n.proxy.Addr)
	}
	cmd.Stdout, cmd.Stderr = f, f
	must(t, cmd.Start())
	n.agent, n.done = cmd, make(chan struct{})
	go func() { cmd.Wait(); f.Close(); close(n.done) }()
	t.Cleanup(func() { l.stopAgent(n, syscall.SIGKILL) })
}

func (l *lab) stopAgent(n *labNode, sig syscall.Signal) {
	if n.agent == nil {
		return
	}
	n.agent.Process.Signal(sig)
	select {
	case <-n.done:
	case <-time.After(30 * time.Second):
		n.agent.Process.Kill()
		<-n.done
	}
	n.agent = nil
}

// TestLBAnnounceNodeAgent is a node's agent of TestKubeLBAnnounce (run by
// it in a child process; skipped otherwise).
func TestLBAnnounceNodeAgent(t *testing.T) {
	node := os.Getenv("LB_AGENT_NODE")
	if node == "" {
		t.Skip("run by TestKubeLBAnnounce")
	}
	h, err := netops.Open(os.Getenv("LB_AGENT_NETNS"))
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM, os.Interrupt)
		<-ch
		cancel()
	}()
	// The Services proxy beside it, on the same informer cache, as
	// cnibox-agent --service-proxy --lb-announce runs them.
	kc := kubeapi.Cluster{Kubeconfig: os.Getenv("LB_AGENT_KUBECONFIG"), APIURL: os.Getenv("LB_AGENT_API"), NodeName: node}
	c := cluster.New(kc, nil)
	c.Start(ctx)
	go func() {
		err := services.Watch(ctx, services.WatchConfig{Cache: c, Table: nft.NewServices(h.NFT(), nft.ServicesOptions{}),
			NodePorts: services.NodePortAddresses{Primary: true}, IfaceAddrs: func() ([]netip.Addr, error) { return nil, nil },
			ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}})
		if err != nil {
			t.Errorf("the Services proxy: %v", err)
		}
	}()
	// Its metrics on a port of 127.0.0.1, named in the data directory's
	// file metrics-addr (lab.metric reads them).
	reg := prometheus.NewRegistry()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	go http.Serve(ln, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	must(t, os.WriteFile(filepath.Join(os.Getenv("LB_AGENT_DATA"), "metrics-addr"), []byte(ln.Addr().String()), 0o644))
	must(t, Run(ctx, Config{
		Cluster: kc, Cache: c, Register: reg.Register,
		Host: h, DataDir: os.Getenv("LB_AGENT_DATA"), CRDPoll: time.Second, Recheck: time.Hour,
		Overlay: func() (string, bool) { return "eth0", true },
	}))
}

// startLab starts the API server (test/kube) with the pools' CRD, the
// Leases' namespace and the pools "lb" (192.168.77.200-209, nodes
// lb=true), "any" (192.168.77.210-219) and "v6" (2001:db8:77::200-20f,
// nodes lb=true), the lab and an agent on each node (each through a proxy
// of its own to the API server when proxied: kube.Proxy).
func startLab(t *testing.T, proxied bool) *lab {
	t.Helper()
	nstest.RequireRoot(t)
	kc := kube.Start(t, nil)
	cs := kube.Clientset(t, kc)
	ctx := context.Background()
	crd, err := os.ReadFile("../../deploy/kubernetes/loadbalancerippool-crd.yaml")
	must(t, err)
	kube.CreateCRD(t, cs, crd, "/apis/cnibox.io/v1alpha1/loadbalancerippools")
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: LeaseNamespace}}, metav1.CreateOptions{})
	must(t, err)
	for _, p := range []string{
		`{"apiVersion":"cnibox.io/v1alpha1","kind":"LoadBalancerIPPool","metadata":{"name":"lb"},"spec":{"blocks":[{"start":"192.168.77.200","stop":"192.168.77.209"}],"announce":{"nodeSelector":{"matchLabels":{"lb":"true"}}}}}`,
		`{"apiVersion":"cnibox.io/v1alpha1","kind":"LoadBalancerIPPool","metadata":{"name":"any"},"spec":{"blocks":[{"start":"192.168.77.210","stop":"192.168.77.219"}]}}`,
		`{"apiVersion":"cnibox.io/v1alpha1","kind":"LoadBalancerIPPool","metadata":{"name":"v6"},"spec":{"blocks":[{"start":"2001:db8:77::200","stop":"2001:db8:77::20f"}],"announce":{"nodeSelector":{"matchLabels":{"lb":"true"}}}}}`,
	} {
		must(t, cs.CoreV1().RESTClient().Post().AbsPath("/apis/cnibox.io/v1alpha1/loadbalancerippools").Body([]byte(p)).SetHeader("Content-Type", "application/json").Do(ctx).Error())
	}

	l := newLab(t, kc, cs)
	for _, n := range l.nodes {
		if proxied {
			n.proxy = kube.NewProxy(t)
		}
		l.startAgent(t, n)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range l.nodes {
				b, _ := os.ReadFile(n.log)
				t.Logf("agent of %s:\n%s", n.name, b)
			}
		}
	})
	return l
}

// TestKubeLBAnnounce: load balancer announcements on a real API server
// (test/kube) with three nodes of namespaces and their agents in child
// processes. Two pools: "lb" (192.168.77.200-209, announced by the nodes
// labelled lb=true: n1 and n2) and "any" (192.168.77.210-219, every
// node). Service a (externalTrafficPolicy Cluster) holds .200: one of n1
// and n2 answers for it, never n3; the client on the LAN reaches the
// announcer at it. Its announcer dies (agent SIGKILLed and uplink down,
// -kills times, LB_KILLS): the address moves to the other, never held by
// two at any instant (the kernels' addresses every 10 ms, and ARP from
// the LAN); the time from the death to the client's first connection
// answered by the new announcer is logged (p50, p99, max). Service b
// (Local) holds .210 with its one ready endpoint on n3: only n3 announces
// it; the endpoint moves to n2: so does the address. Service c holds
// 2001:db8:77::200 of pool "v6" (n1 and n2): announced by unsolicited
// neighbour advertisement, watched by NDP from the LAN, reached from the
// client, moved by its holder's death (twice, -kills6 times: LB_KILLS6). Through the Services proxy
// (agent/services, run beside each agent on its informer cache), with a
// pod on n3 as the endpoint: Service web (Cluster) reached at its
// announced address, masqueraded to the announcer's; weblocal (Local)
// announced by n3 alone, the pod seeing the client's own address. The
// Services deleted: no node holds any of the addresses. Run with -tags kube, as root, under
// flock /tmp/cnibox-kube.lock.
func TestKubeLBAnnounce(t *testing.T) {
	l := startLab(t, false)
	cs, ctx := l.cs, context.Background()
	stopA, stopB, stopC := l.watch(t, addrA), l.watch(t, addrB), l.watch(t, addrC)
	defer stopA()
	defer stopB()
	defer stopC()
	l.service(t, "a", addrA, corev1.ServiceExternalTrafficPolicyCluster)
	holder := l.waitHolder(t, addrA, "", "n1", "n2")
	l.waitRecorded(t, holder, addrA, holder.name)

	// Deaths: the announcer's agent SIGKILLed and its uplink down (the
	// node gone from the LAN); the address moves; the node comes back.
	kills := 3
	if s := os.Getenv("LB_KILLS"); s != "" {
		kills, _ = strconv.Atoi(s)
	}
	var took []time.Duration
	for i := range kills {
		old := holder
		t0 := time.Now()
		l.stopAgent(old, syscall.SIGKILL)
		must(t, old.h.SetLinkDown("eth0"))
		first := l.firstAnswer(t, addrA, old.name, t0)
		took = append(took, first.Sub(t0))
		holder = l.waitHolder(t, addrA, old.name, "n1", "n2")
		t.Logf("death %d: %s's agent killed and its uplink down; %s announces %s; the client's first connection answered by it %v after", i+1, old.name, holder.name, addrA, first.Sub(t0))
		l.revive(t, old)
		l.startAgent(t, old)
		l.waitRecorded(t, old, addrA, holder.name)
		if h := l.holders(t, addrA); !slices.Equal(h, []string{holder.name}) {
			t.Fatalf("after %s came back: holders %v, want %s", old.name, h, holder.name)
		}
	}
	logPercentiles(t, "from an announcer's death to the client's first connection answered by the next", took)

	// IPv6: held by one of n1 and n2, announced by unsolicited neighbour
	// advertisement; the client reaches it, and again after its holder's
	// death (its neighbour entry moved by the new holder's advertisement).
	l.service(t, "c", addrC, corev1.ServiceExternalTrafficPolicyCluster)
	holder6 := l.waitHolder(t, addrC, "", "n1", "n2")
	kills6 := 2
	if s := os.Getenv("LB_KILLS6"); s != "" {
		kills6, _ = strconv.Atoi(s)
	}
	var took6 []time.Duration
	for i := range kills6 {
		old := holder6
		t0 := time.Now()
		l.stopAgent(old, syscall.SIGKILL)
		must(t, old.h.SetLinkDown("eth0"))
		first := l.firstAnswer(t, addrC, old.name, t0)
		took6 = append(took6, first.Sub(t0))
		holder6 = l.waitHolder(t, addrC, old.name, "n1", "n2")
		t.Logf("IPv6 death %d: %s's agent killed and its uplink down; %s announces %s; the client's first connection answered by it %v after", i+1, old.name, holder6.name, addrC, first.Sub(t0))
		l.revive(t, old)
		l.startAgent(t, old)
		l.waitRecorded(t, old, addrC, holder6.name)
	}
	logPercentiles(t, "IPv6: from an announcer's death to the client's first connection answered by the next", took6)

	// externalTrafficPolicy Local: only the node with the ready endpoint.
	l.service(t, "b", addrB, corev1.ServiceExternalTrafficPolicyLocal)
	l.endpoints(t, "b", "n3")
	l.waitHolder(t, addrB, "", "n3")
	l.endpoints(t, "b", "n2")
	l.waitHolder(t, addrB, "n3", "n2")

	// Through the Services proxy: Service web's endpoint is a pod on n3.
	// Cluster (192.168.77.201, pool lb): the announcer (n1 or n2) DNATs the
	// client's connection to it, masqueraded to its own address; Local
	// (192.168.77.211, pool any): n3 announces it and the pod sees the
	// client's own address.
	pod := l.addPod(t, l.node("n3"))
	web := netip.MustParseAddr("192.168.77.201")
	l.serviceTo(t, "web", web, corev1.ServiceExternalTrafficPolicyCluster, pod)
	h := l.waitHolder(t, web, "", "n1", "n2")
	l.waitSeenVia(t, web, "192.168.77."+strconv.Itoa(10+slices.Index(l.nodes, h)+1))
	local := netip.MustParseAddr("192.168.77.211")
	l.serviceTo(t, "weblocal", local, corev1.ServiceExternalTrafficPolicyLocal, pod)
	l.waitHolder(t, local, "", "n3")
	l.waitSeenVia(t, local, "192.168.77.100")

	// The Services deleted: no node announces their addresses.
	for _, s := range []string{"a", "b", "c", "web", "weblocal"} {
		must(t, cs.CoreV1().Services("default").Delete(ctx, s, metav1.DeleteOptions{}))
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		a, b, c := l.holders(t, addrA), l.holders(t, addrB), l.holders(t, addrC)
		if len(a)+len(b)+len(c) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after the Services' deletion: %s on %v, %s on %v, %s on %v", addrA, a, addrB, b, addrC, c)
		}
	}
	if got := l.answer(t, addrA, 500*time.Millisecond); got != "" {
		t.Errorf("after the Services' deletion %s answers %q", addrA, got)
	}
}

// service creates Service name of type LoadBalancer with ip as its
// ingress (the LoadBalancer IPAM's write, agent/lbipam, done here by hand),
// on port 9999, which no one serves: the client's connections to port
// 8080 of ip reach the announcing node's own server (serveName).
func (l *lab) service(t *testing.T, name string, ip netip.Addr, policy corev1.ServiceExternalTrafficPolicy) {
	t.Helper()
	ctx := context.Background()
	s, err := l.cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: policy,
			Selector: map[string]string{"app": name}, Ports: []corev1.ServicePort{{Port: 9999, Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	must(t, err)
	s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip.String()}}
	_, err = l.cs.CoreV1().Services("default").UpdateStatus(ctx, s, metav1.UpdateOptions{})
	must(t, err)
}

// serviceTo creates Service name of type LoadBalancer at ip (port 80)
// with pod as its one ready endpoint (on n3).
func (l *lab) serviceTo(t *testing.T, name string, ip netip.Addr, policy corev1.ServiceExternalTrafficPolicy, pod netip.AddrPort) {
	t.Helper()
	ctx := context.Background()
	s, err := l.cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: policy, Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(int32(pod.Port()))}}},
	}, metav1.CreateOptions{})
	must(t, err)
	s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip.String()}}
	_, err = l.cs.CoreV1().Services("default").UpdateStatus(ctx, s, metav1.UpdateOptions{})
	must(t, err)
	yes, node, port, proto := true, "n3", int32(pod.Port()), corev1.ProtocolTCP
	empty := ""
	_, err = l.cs.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{pod.Addr().String()}, NodeName: &node,
			Conditions: discoveryv1.EndpointConditions{Ready: &yes}}},
		Ports: []discoveryv1.EndpointPort{{Name: &empty, Port: &port, Protocol: &proto}},
	}, metav1.CreateOptions{})
	must(t, err)
}

// waitSeenVia waits until a connection of the client to addr:80 reaches
// the pod, which sees it come from from.
func (l *lab) waitSeenVia(t *testing.T, addr netip.Addr, from string) {
	t.Helper()
	var got string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if got = l.seen(t, addr, time.Second); got == from {
			return
		}
	}
	t.Fatalf("the client's connection to %s:80: the pod sees it from %q, want %s", addr, got, from)
}

// endpoints makes Service name's EndpointSlice hold one ready endpoint on
// node.
func (l *lab) endpoints(t *testing.T, name, node string) {
	t.Helper()
	ctx := context.Background()
	yes := true
	i := slices.IndexFunc(l.nodes, func(n *labNode) bool { return n.name == node }) + 1
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{fmt.Sprintf("10.244.%d.2", i)}, NodeName: &node,
			Conditions: discoveryv1.EndpointConditions{Ready: &yes}}},
	}
	c := l.cs.DiscoveryV1().EndpointSlices("default")
	if old, err := c.Get(ctx, es.Name, metav1.GetOptions{}); err == nil {
		es.ResourceVersion = old.ResourceVersion
		_, err = c.Update(ctx, es, metav1.UpdateOptions{})
		must(t, err)
		return
	}
	_, err := c.Create(ctx, es, metav1.CreateOptions{})
	must(t, err)
}

// waitRecorded waits until n's agent has recorded holder as ip's
// announcer (what cnibox inspect lb shows).
func (l *lab) waitRecorded(t *testing.T, n *labNode, ip netip.Addr, holder string) {
	t.Helper()
	var st store.LBState
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		s, err := store.OpenWith(store.Dir(n.data), store.Options{NoCreate: true})
		if err != nil {
			continue
		}
		st, _, err = s.LB()
		s.Close()
		if err == nil && slices.ContainsFunc(st.Addresses, func(a store.LBAddress) bool { return a.IP == ip && a.Holder == holder }) {
			return
		}
	}
	t.Fatalf("%s's agent records %+v; want %s as %s's announcer", n.name, st, holder, ip)
}

// firstAnswer connects from the client to addr every 50 ms (each try
// 200 ms at most) from since on, and returns when a node other than old
// first answered.
func (l *lab) firstAnswer(t *testing.T, addr netip.Addr, old string, since time.Time) time.Time {
	t.Helper()
	for time.Since(since) < time.Minute {
		try := time.Now()
		if got := l.answer(t, addr, 200*time.Millisecond); got != "" && got != old {
			return try
		}
		time.Sleep(time.Until(try.Add(50 * time.Millisecond)))
	}
	t.Fatalf("no node but %s answered at %s within a minute", old, addr)
	return time.Time{}
}

// metric is the value of the metric name (no labels) that n's agent
// serves now (-1: none, or the agent does not answer).
func (l *lab) metric(t *testing.T, n *labNode, name string) float64 {
	addr, err := os.ReadFile(filepath.Join(n.data, "metrics-addr"))
	if err != nil {
		return -1
	}
	resp, err := http.Get("http://" + string(addr) + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

// waitMetric waits until the metric name of n's agent satisfies ok.
func (l *lab) waitMetric(t *testing.T, n *labNode, name string, ok func(float64) bool) {
	t.Helper()
	var v float64
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if v = l.metric(t, n, name); ok(v) {
			return
		}
	}
	t.Errorf("%s's agent: %s = %v, never what the test waits for", n.name, name, v)
}

func logPercentiles(t *testing.T, what string, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	p := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	t.Logf("%s, %d times: p50 %v, p99 %v, max %v", what, len(s), p(0.5), p(0.99), s[len(s)-1])
}
