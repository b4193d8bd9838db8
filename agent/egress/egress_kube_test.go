//go:build kube

package egress

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cnibox/cnibox/agent/kubeapi"
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
// of its own), each with its pod range 10.244.N.0/24 behind a bridge,
// host-gw routes to the others' and the overlay's masquerade; a server
// outside the cluster on the LAN (192.168.77.100) that answers each
// connection with the source address it sees. Each node's agent is this
// test binary in a child process (TestEgressNodeAgent), so that it can be
// killed, reaching the API through a proxy of the test's, so that it can
// be cut off.
type lab struct {
	nodes  []*labNode
	ext    *netops.Handle
	server netip.AddrPort
	kc     string
	cs     kubernetes.Interface
}

type labNode struct {
	name  string
	h     *netops.Handle
	ip    netip.Addr
	pods  map[string]*netops.Handle // by pod name
	agent *exec.Cmd
	done  chan struct{}
	log   string
	data  string // the agent's store
	proxy *apiProxy
}

var egressAddr = netip.MustParseAddr("192.168.77.50")

func podRange(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(i), 0}), 24)
}

func newLab(t *testing.T, kc string, cs kubernetes.Interface) *lab {
	t.Helper()
	open := func(prefix string) *netops.Handle {
		h, err := netops.Open(nstest.NewNS(t, prefix))
		must(t, err)
		t.Cleanup(func() { h.Close() })
		return h
	}
	lan := open("eglan")
	br, err := lan.EnsureBridge(netops.BridgeOpts{Name: "br0"})
	must(t, err)
	l := &lab{kc: kc, cs: cs, ext: open("egext")}
	attach := func(h *netops.Handle, port string, addr netip.Prefix) {
		_, _, err := lan.EnsureVeth(netops.VethOpts{HostName: port, PeerName: "eth0", Peer: h, MasterIndex: br.Index})
		must(t, err)
		must(t, h.EnsureAddr("eth0", addr, netops.AddrOpts{}))
	}
	attach(l.ext, "ext", netip.MustParsePrefix("192.168.77.100/24"))
	l.server = nstest.Serve(t, l.ext.Path(), netip.MustParseAddr("192.168.77.100"))
	for i := 1; i <= 3; i++ {
		n := &labNode{name: fmt.Sprintf("n%d", i), h: open(fmt.Sprintf("egn%d", i)),
			ip: netip.AddrFrom4([4]byte{192, 168, 77, byte(10 + i)}), pods: map[string]*netops.Handle{}}
		attach(n.h, n.name, netip.PrefixFrom(n.ip, 24))
		forward := "1"
		if i == 2 {
			forward = "0" // (not yet, and its agent cannot turn it on: see TestKubeEgress)
		}
		must(t, n.h.SetSysctl("net.ipv4.ip_forward", forward))
		_, err := n.h.EnsureBridge(netops.BridgeOpts{Name: "cni0"})
		must(t, err)
		gw := podRange(i).Addr().Next()
		must(t, n.h.EnsureAddr("cni0", netip.PrefixFrom(gw, 24), netops.AddrOpts{}))
		_, err = n.h.NFT().EnsureOverlayMasq([]nft.OverlayMasqNet{{Network: netip.MustParsePrefix("10.244.0.0/16"), Subnet: podRange(i)}}, nft.OverlayMasqOpts{})
		must(t, err)
		for j := 1; j <= 3; j++ {
			if j != i {
				must(t, n.h.EnsureRoute(netops.Route{Dst: podRange(j), GW: netip.AddrFrom4([4]byte{192, 168, 77, byte(10 + j)}), Dev: "eth0"}))
			}
		}
		_, err = cs.CoreV1().Nodes().Create(context.Background(), &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: map[string]string{"egress": strconv.FormatBool(i <= 2)}},
			// (dual stack: TestKubeEgress6 adds the IPv6 ranges' addresses)
			Spec: corev1.NodeSpec{PodCIDR: podRange(i).String(), PodCIDRs: []string{podRange(i).String(), podRange6(i).String()}},
		}, metav1.CreateOptions{})
		must(t, err)
		n.proxy = newAPIProxy(t)
		l.nodes = append(l.nodes, n)
	}
	return l
}

// addPod adds a pod namespace behind node n's bridge at 10.244.N.k and the
// Pod object, Running with that address.
func (l *lab) addPod(t *testing.T, n *labNode, name string, k int, labels map[string]string) {
	t.Helper()
	h, err := netops.Open(nstest.NewNS(t, "egp"))
	must(t, err)
	t.Cleanup(func() { h.Close() })
	br, err := n.h.LinkByName("cni0")
	must(t, err)
	_, _, err = n.h.EnsureVeth(netops.VethOpts{HostName: "v" + name, PeerName: "eth0", Peer: h, MasterIndex: br.Index})
	must(t, err)
	i := slices.Index(l.nodes, n) + 1
	addr := netip.AddrFrom4([4]byte{10, 244, byte(i), byte(k)})
	must(t, h.EnsureAddr("eth0", netip.PrefixFrom(addr, 24), netops.AddrOpts{}))
	must(t, h.EnsureRoute(netops.Route{GW: podRange(i).Addr().Next(), Dev: "eth0"}))
	n.pods[name] = h
	ctx := context.Background()
	p, err := l.cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       corev1.PodSpec{NodeName: n.name, Containers: []corev1.Container{{Name: "c", Image: "x"}}},
	}, metav1.CreateOptions{})
	must(t, err)
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: addr.String(), PodIPs: []corev1.PodIP{{IP: addr.String()}}}
	_, err = l.cs.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{})
	must(t, err)
}

// seen is the source the server sees a connection of pod come from, or
// the zero Addr when it cannot connect within timeout.
func (l *lab) seen(t *testing.T, pod *netops.Handle, timeout time.Duration) netip.Addr {
	var got netip.Addr
	_ = nstest.Run(t, pod.Path(), func() error {
		c, err := net.DialTimeout("tcp", l.server.String(), timeout)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(timeout))
		b, err := io.ReadAll(c)
		if err != nil {
			return err
		}
		if ap, err := netip.ParseAddrPort(string(b)); err == nil {
			got = ap.Addr().Unmap()
		}
		return nil
	})
	return got
}

// waitSeen waits until pod's connections are seen from want.
func (l *lab) waitSeen(t *testing.T, what string, pod *netops.Handle, want netip.Addr) {
	t.Helper()
	var got netip.Addr
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if got = l.seen(t, pod, 2*time.Second); got == want {
			return
		}
	}
	t.Fatalf("%s: the server sees %v, want %v", what, got, want)
}

// holders are the nodes whose uplink has the egress address.
func (l *lab) holders(t *testing.T) []string {
	var out []string
	for _, n := range l.nodes {
		ps, err := n.h.Addrs("eth0")
		if err != nil {
			t.Errorf("addresses of %s: %v", n.name, err)
			continue
		}
		if slices.Contains(ps, netip.PrefixFrom(egressAddr, 32)) {
			out = append(out, n.name)
		}
	}
	return out
}

// watchHolders checks, every 10 ms until the test ends, that at most one
// node holds the address in its kernel, and, from the LAN (the server's
// namespace), that at most one MAC answers an ARP request for it.
func (l *lab) watchHolders(t *testing.T) (stop func()) {
	return nstest.WatchOneHolder(t, nstest.NewARPProber(t, l.ext.Path(), "eth0"), egressAddr, 10*time.Millisecond, func() []string { return l.holders(t) })
}

// startAgent starts node n's agent.
func (l *lab) startAgent(t *testing.T, n *labNode) {
	t.Helper()
	n.log, n.data = filepath.Join(t.TempDir(), n.name+".log"), t.TempDir()
	f, err := os.Create(n.log)
	must(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^TestEgressNodeAgent$", "-test.v")
	cmd.Env = append(os.Environ(), "EGRESS_AGENT_NODE="+n.name, "EGRESS_AGENT_NETNS="+n.h.Path(),
		"EGRESS_AGENT_KUBECONFIG="+l.kc, "EGRESS_AGENT_API=https://"+n.proxy.addr, "EGRESS_AGENT_DATA="+n.data)
	if n.name == "n2" {
		// As in the manifest's container: /proc/sys read-only (a mount
		// namespace of its own, / private in it, which Go's exec makes).
		cmd.Env = append(cmd.Env, "EGRESS_AGENT_RO_SYSCTL=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	}
	cmd.Stdout, cmd.Stderr = f, f
	must(t, cmd.Start())
	n.agent, n.done = cmd, make(chan struct{})
	go func() { cmd.Wait(); f.Close(); close(n.done) }()
	t.Cleanup(func() { l.stopAgent(n, syscall.SIGKILL) })
}

// stopAgent stops node n's agent with sig and waits for it.
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

// TestEgressNodeAgent is a node's agent of TestKubeEgress (run by it in a
// child process; skipped otherwise).
func TestEgressNodeAgent(t *testing.T) {
	node := os.Getenv("EGRESS_AGENT_NODE")
	if node == "" {
		t.Skip("run by TestKubeEgress")
	}
	if os.Getenv("EGRESS_AGENT_RO_SYSCTL") != "" {
		must(t, syscall.Mount("/proc/sys", "/proc/sys", "", syscall.MS_BIND|syscall.MS_REC, ""))
		must(t, syscall.Mount("", "/proc/sys", "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""))
	}
	h, err := netops.Open(os.Getenv("EGRESS_AGENT_NETNS"))
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM, os.Interrupt)
		<-ch
		cancel()
	}()
	err = Run(ctx, Config{
		Cluster:   kubeapi.Cluster{Kubeconfig: os.Getenv("EGRESS_AGENT_KUBECONFIG"), APIURL: os.Getenv("EGRESS_AGENT_API"), NodeName: node},
		Namespace: LeaseNamespace, Host: h, DataDir: os.Getenv("EGRESS_AGENT_DATA"), CRDPoll: time.Second,
		// (never within a test: what the lab's nodes do is seen as it
		// happens, or not at all)
		Recheck: time.Hour,
		Overlay: func() (string, []netip.Prefix, bool) {
			nets := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
			if os.Getenv("EGRESS_AGENT_IPV6") != "" {
				nets = append(nets, cluster6)
			}
			return "eth0", nets, true
		},
	})
	must(t, err)
}

// apiProxy forwards TCP connections to the API server until cut, then
// closes them all and every new one: an agent cut off from the API.
type apiProxy struct {
	addr string
	cut  atomic.Bool
	mu   sync.Mutex
	open map[net.Conn]bool
}

func newAPIProxy(t *testing.T) *apiProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	t.Cleanup(func() { ln.Close() })
	p := &apiProxy{addr: ln.Addr().String(), open: map[net.Conn]bool{}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if p.cut.Load() {
				c.Close()
				continue
			}
			up, err := net.Dial("tcp", "127.0.0.1:16443")
			if err != nil {
				c.Close()
				continue
			}
			p.track(c, up)
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
	return p
}

func (p *apiProxy) track(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		p.open[c] = true
	}
}

// setCut cuts (or restores) the agent's API.
func (p *apiProxy) setCut(on bool) {
	p.cut.Store(on)
	if !on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.open {
		c.Close()
		delete(p.open, c)
	}
}

// TestKubeEgress: EgressGateway on a real API server (test/kube) with
// three nodes of namespaces and their agents in child processes. The
// schema and the admission policy refuse what cannot work, naming the
// field; a selected pod leaves from the egress address from the holder's
// node and from another, an unselected one from its node's address; n2,
// which does not forward at first and whose agent cannot turn forwarding
// on, holds nothing until it forwards, and publishes its networks as soon
// as it does (the agents' periodic recheck is an hour here); the
// holder's agent killed (SIGKILL, -kills times, EGRESS_KILLS), then cut off
// from the API: the address moves to the other eligible node, never held
// by two at any instant (the kernels' addresses, every 10 ms, and ARP
// from the LAN); the time from the kill to the first connection seen
// from the egress address is logged (p50, p99); the gateway deleted: the
// pods leave from their nodes again and no rule, route or address is
// left. Run with -tags kube, as root, under flock /tmp/cnibox-kube.lock.
func TestKubeEgress(t *testing.T) {
	nstest.RequireRoot(t)
	kc := kube.Start(t, nil)
	cs := kube.Clientset(t, kc)
	ctx := context.Background()
	crd, err := os.ReadFile("../../deploy/kubernetes/egressgateway-crd.yaml")
	must(t, err)
	kube.CreateCRD(t, cs, crd, "/apis/cnibox.io/v1alpha1/egressgateways")
	applyEgressPolicy(t, cs)
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: LeaseNamespace}}, metav1.CreateOptions{})
	must(t, err)
	_, err = cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		must(t, err)
	}
	refused(t, cs)

	l := newLab(t, kc, cs)
	n1, n3 := l.nodes[0], l.nodes[2]
	l.addPod(t, n1, "a1", 2, map[string]string{"app": "egress"})
	l.addPod(t, n3, "a3", 2, map[string]string{"app": "egress"})
	l.addPod(t, n3, "b3", 3, map[string]string{"app": "other"})
	for _, n := range l.nodes {
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
	stop := l.watchHolders(t)
	defer stop()
	gw := `{"apiVersion":"cnibox.io/v1alpha1","kind":"EgressGateway","metadata":{"name":"gw"},
		"spec":{"podSelector":{"matchLabels":{"app":"egress"}},"egressIPs":["192.168.77.50"],"nodeSelector":{"matchLabels":{"egress":"true"}}}}`
	must(t, createGateway(cs, gw))

	// The path: both selected pods from the address, the other from n3.
	l.waitSeen(t, "a3 (n3, selected)", n3.pods["a3"], egressAddr)
	l.waitSeen(t, "a1 (n1, selected)", n1.pods["a1"], egressAddr)
	l.waitSeen(t, "b3 (n3, not selected)", n3.pods["b3"], n3.ip)
	holder := l.waitHolder(t, "")
	if holder.name != "n1" {
		t.Fatalf("%s holds the address: n3 is not labelled egress=true, and n2 does not forward", holder.name)
	}
	l.waitStatus(t, holder.name)

	// n2 forwards: its agent, which could not turn forwarding on (its
	// /proc/sys is read-only, as in the manifest's container), publishes
	// its networks at once (the bridge role turns forwarding on with a
	// node's first pod; the agent reads it again only every Recheck, an
	// hour here), and n2 may hold the address from then on.
	n2 := l.nodes[1]
	if v, err := n2.h.Sysctl("net.ipv4.ip_forward"); err != nil || v != "0" {
		t.Fatalf("n2's net.ipv4.ip_forward = %q, %v; want 0: its agent turned it on", v, err)
	}
	must(t, n2.h.SetSysctl("net.ipv4.ip_forward", "1"))
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		node, err := cs.CoreV1().Nodes().Get(ctx, "n2", metav1.GetOptions{})
		must(t, err)
		if v := node.Annotations[NetworksAnnotation]; v == "192.168.77.0/24" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("a minute after n2 began to forward: its %s is %q, want 192.168.77.0/24", NetworksAnnotation, v)
		}
	}

	// Deaths: the holder's agent SIGKILLed and its uplink down at once
	// (the node gone from the LAN); the address moves; the node comes back
	// with its agent, which leaves the new holder be.
	kills := 3
	if s := os.Getenv("EGRESS_KILLS"); s != "" {
		kills, _ = strconv.Atoi(s)
	}
	var took []time.Duration
	for i := range kills {
		old := holder
		t0 := time.Now()
		l.stopAgent(old, syscall.SIGKILL)
		must(t, old.h.SetLinkDown("eth0"))
		first := l.firstSeen(t, n3.pods["a3"], t0)
		took = append(took, first.Sub(t0))
		holder = l.waitHolder(t, old.name)
		t.Logf("death %d: %s's agent killed and its uplink down; %s holds the address; a3's first connection from it %v after", i+1, old.name, holder.name, first.Sub(t0))
		l.revive(t, old)
		l.startAgent(t, old)
		l.waitAgentSees(t, old, holder.name)
		if h := l.holders(t); !slices.Equal(h, []string{holder.name}) {
			t.Fatalf("after %s came back: holders %v, want %s", old.name, h, holder.name)
		}
	}
	logPercentiles(t, "from a holder node's death to a pod's first connection from the address", took)

	// The holder's agent alone killed: the node keeps forwarding until
	// the kernel drops the address; another node takes it, never both.
	old := holder
	l.stopAgent(old, syscall.SIGKILL)
	holder = l.waitHolder(t, old.name)
	l.waitSeen(t, "a3 after "+old.name+"'s agent was killed", n3.pods["a3"], egressAddr)
	l.startAgent(t, old)
	l.waitAgentSees(t, old, holder.name)

	// Cut off from the API: the holder drops the address, the other takes
	// it (the watchers check that never both hold it).
	old = holder
	t0 := time.Now()
	old.proxy.setCut(true)
	holder = l.waitHolder(t, old.name)
	t.Logf("%s cut off from the API: %s holds the address %v after the cut", old.name, holder.name, time.Since(t0))
	l.waitSeen(t, "a3 with "+old.name+" cut off", n3.pods["a3"], egressAddr)
	old.proxy.setCut(false)
	l.waitSeen(t, "a3 after the partition healed", n3.pods["a3"], egressAddr)

	// The gateway deleted: back to the nodes' addresses, nothing left.
	must(t, l.cs.CoreV1().RESTClient().Delete().AbsPath("/apis/cnibox.io/v1alpha1/egressgateways/gw").Do(ctx).Error())
	l.waitSeen(t, "a3 after the gateway's deletion", n3.pods["a3"], n3.ip)
	l.waitSeen(t, "a1 after the gateway's deletion", n1.pods["a1"], n1.ip)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		left := l.leftovers(t)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after the gateway's deletion: %v", left)
		}
	}
	for _, n := range l.nodes {
		l.stopAgent(n, syscall.SIGTERM)
	}
	if left := l.leftovers(t); len(left) > 0 {
		t.Errorf("after the agents stopped: %v", left)
	}
}

// revive brings a dead node back: its uplink up and its routes to the
// other nodes' pods (gone with the link).
func (l *lab) revive(t *testing.T, n *labNode) {
	t.Helper()
	must(t, n.h.SetLinkUp("eth0"))
	i := slices.Index(l.nodes, n) + 1
	for j := 1; j <= 3; j++ {
		if j != i {
			must(t, n.h.EnsureRoute(netops.Route{Dst: podRange(j), GW: netip.AddrFrom4([4]byte{192, 168, 77, byte(10 + j)}), Dev: "eth0"}))
		}
	}
}

// waitAgentSees waits until n's agent has recorded holder as the
// address's holder.
func (l *lab) waitAgentSees(t *testing.T, n *labNode, holder string) {
	t.Helper()
	var st store.EgressState
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		s, err := store.OpenWith(store.Dir(n.data), store.Options{NoCreate: true})
		if err != nil {
			continue
		}
		st, _, err = s.Egress()
		s.Close()
		if err == nil && len(st.Gateways) == 1 && len(st.Gateways[0].IPs) == 1 && st.Gateways[0].IPs[0].Holder == holder {
			return
		}
	}
	t.Fatalf("%s's agent records %+v; want %s as the holder", n.name, st, holder)
}

// leftovers lists what the nodes still have of egress.
func (l *lab) leftovers(t *testing.T) []string {
	var out []string
	for _, n := range l.nodes {
		if rules, err := n.h.NFT().EgressRules(); err != nil || len(rules) > 0 {
			out = append(out, fmt.Sprintf("%s: egress rules %q (%v)", n.name, rules, err))
		}
		if routes, err := n.h.EgressRoutes(); err != nil || len(routes) > 0 {
			out = append(out, fmt.Sprintf("%s: egress routes %v (%v)", n.name, routes, err))
		}
	}
	if hs := l.holders(t); len(hs) > 0 {
		out = append(out, fmt.Sprintf("the address on %v", hs))
	}
	return out
}

// waitHolder waits until one node other than not holds the address, and
// returns it.
func (l *lab) waitHolder(t *testing.T, not string) *labNode {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if hs := l.holders(t); len(hs) == 1 && hs[0] != not {
			return l.nodes[slices.IndexFunc(l.nodes, func(n *labNode) bool { return n.name == hs[0] })]
		}
	}
	t.Fatalf("no node but %q holds %s after a minute: %v", not, egressAddr, l.holders(t))
	return nil
}

// waitStatus waits until the gateway's status names holder and is Ready.
func (l *lab) waitStatus(t *testing.T, holder string) {
	t.Helper()
	var g EgressGateway
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		b, err := l.cs.CoreV1().RESTClient().Get().AbsPath("/apis/cnibox.io/v1alpha1/egressgateways/gw").DoRaw(context.Background())
		must(t, err)
		must(t, json.Unmarshal(b, &g))
		ready := slices.ContainsFunc(g.Status.Conditions, func(c metav1.Condition) bool { return c.Type == "Ready" && c.Status == metav1.ConditionTrue })
		if ready && slices.Equal(g.Status.EgressIPs, []HeldIP{{EgressIP: egressAddr.String(), Node: holder}}) {
			return
		}
	}
	t.Fatalf("the gateway's status %+v; want %s held by %s, Ready", g.Status, egressAddr, holder)
}

// firstSeen connects from pod every 50 ms (each try 200 ms at most) from
// since on, and returns when the server first saw the egress address.
func (l *lab) firstSeen(t *testing.T, pod *netops.Handle, since time.Time) time.Time {
	t.Helper()
	for time.Since(since) < time.Minute {
		try := time.Now()
		if l.seen(t, pod, 200*time.Millisecond) == egressAddr {
			return try
		}
		time.Sleep(time.Until(try.Add(50 * time.Millisecond)))
	}
	t.Fatalf("no connection seen from %s within a minute", egressAddr)
	return time.Time{}
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
