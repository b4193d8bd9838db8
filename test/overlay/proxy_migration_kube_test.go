//go:build kube

package overlay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
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
	"github.com/cnibox/cnibox/test/kube"
)

// TestKubeProxyMigration moves a node's Services from the real kube-proxy
// v1.34.2 to cnibox-agent --service-proxy-only and back, as
// docs/deploy.md says, in both of kube-proxy's modes (nftables; iptables,
// through iptables-nft), with TCP connections open through a ClusterIP
// the whole time (issue 63):
//
//   - kube-proxy serves the ClusterIP; the pod-like client opens
//     connection A through it, and A echoes;
//   - kube-proxy stops (its DaemonSet removed): its rules stay and serve;
//   - the agent starts with --service-proxy-only (no overlay, no pod API:
//     the node's pods are another CNI's) and --cleanup-kube-proxy against
//     the test API server: it is ready once synced, the ClusterIP is in
//     its table, and nothing of kube-proxy's is left (no table kube-proxy,
//     no KUBE-* chain but the kubelet's); A still echoes, and a new
//     connection B through the ClusterIP (now cnibox's DNAT) echoes;
//   - the way back: the agent stops (its table stays and serves),
//     kube-proxy starts again and writes its rules, `cnibox cleanup
//     services` removes cnibox's table; A and B still echo, and a new
//     connection C (kube-proxy's DNAT again) echoes.
//
// Established connections survive because conntrack keeps their NAT and
// there is always a NAT chain in the node's namespace to keep the kernel's
// NAT hooks (cnibox's table is in before kube-proxy's goes, and the other
// way round).
func TestKubeProxyMigration(t *testing.T) {
	for _, mode := range []string{"nftables", "iptables"} {
		t.Run(mode, func(t *testing.T) { testKubeProxyMigration(t, mode) })
	}
}

func testKubeProxyMigration(t *testing.T, mode string) {
	kp := kubeProxyBinary(t)
	if mode == "nftables" {
		nstest.RequireProgram(t, "nft", "nftables") // (its nftables mode execs nft)
	} else {
		nstest.RequireProgram(t, "iptables", "iptables")
	}
	c := newCluster(t, 1)
	cs, nodeCfg := c.startControlPlane()
	n := c.nodes[0]
	ctx := context.Background()
	_, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.ip.String()}}}}, metav1.CreateOptions{})
	must(t, err)

	// The node routes between a pod-like client and a backend.
	nh := openH(t, n.ns)
	must(t, nh.SetSysctls(netops.SysctlSetting{Key: "net.ipv4.ip_forward", Value: "1"}))
	backend := nstest.NewNS(t, "mig-be")
	bh := openH(t, backend)
	_, _, err = nh.EnsureVeth(netops.VethOpts{HostName: "mgbe", PeerName: "eth0", Peer: bh})
	must(t, err)
	must(t, nh.EnsureAddr("mgbe", netip.MustParsePrefix("192.168.79.1/24"), netops.AddrOpts{NoDAD: true}))
	beAddr := netip.MustParseAddr("192.168.79.2")
	must(t, bh.EnsureAddr("eth0", netip.PrefixFrom(beAddr, 24), netops.AddrOpts{NoDAD: true}))
	must(t, bh.EnsureRoute(netops.Route{GW: netip.MustParseAddr("192.168.79.1"), Dev: "eth0"}))
	client := nstest.NewNS(t, "mig-cl")
	ch := openH(t, client)
	_, _, err = nh.EnsureVeth(netops.VethOpts{HostName: "mgcl", PeerName: "eth0", Peer: ch})
	must(t, err)
	must(t, nh.EnsureAddr("mgcl", netip.MustParsePrefix("10.244.9.1/24"), netops.AddrOpts{NoDAD: true}))
	must(t, ch.EnsureAddr("eth0", netip.MustParsePrefix("10.244.9.10/24"), netops.AddrOpts{NoDAD: true}))
	must(t, ch.EnsureRoute(netops.Route{GW: netip.MustParseAddr("10.244.9.1"), Dev: "eth0"}))
	serveEcho(t, backend, netip.AddrPortFrom(beAddr, 8080))

	svc, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "echo"}, Spec: corev1.ServiceSpec{
		Ports: []corev1.ServicePort{{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}}}}, metav1.CreateOptions{})
	must(t, err)
	ready := true
	_, err = cs.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "echo-1", Labels: map[string]string{discoveryv1.LabelServiceName: "echo"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{beAddr.String()}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("tcp"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(int32(8080))}},
	}, metav1.CreateOptions{})
	must(t, err)
	cip := netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 80)
	fresh := func() error { // a new connection through the ClusterIP echoes
		conn, err := dialFrom(t, client, cip)
		if err != nil {
			return err
		}
		defer conn.Close()
		return echoes(conn, "new")
	}

	// kube-proxy serves; connection A opens through it.
	proxy := startKubeProxy(t, kp, n, nodeCfg, mode)
	until(t, fmt.Sprintf("kube-proxy (%s mode) serves ClusterIP %v", mode, cip), fresh)
	if tables := kubeProxyTables(t, nh); len(tables) == 0 {
		t.Fatalf("kube-proxy serves, but no table of its is seen: %v", tables)
	}
	connA, err := dialFrom(t, client, cip)
	must(t, err)
	defer connA.Close()
	must(t, echoes(connA, "a1"))

	// kube-proxy's DaemonSet removed: it stops, its rules stay and serve.
	proxy.stop()
	must(t, echoes(connA, "a2"))

	// cnibox's proxy, alone, with the cleanup.
	health := netip.AddrPortFrom(n.ip, 9667)
	c.agentArgs = func(n *node) []string {
		return []string{"--service-proxy-only", "--cleanup-kube-proxy", "--kubeconfig-file", nodeCfg, "--node-name", n.name,
			"--cluster-cidr", "10.244.0.0/16", "--health-addr", health.String()}
	}
	n.startAgent()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent log:\n%s", n.log())
		}
	})
	until(t, "the proxy-only agent's /readyz answers 200 (its first sync is in)", func() error { return get200("http://" + health.String() + "/readyz") })
	until(t, fmt.Sprintf("ClusterIP %v is in map %s", cip.Addr(), nft.ServiceIPs4), func() error {
		if in, _ := inServiceIPs4(t, n.ns, cip.Addr()); !in {
			return errors.New("not there")
		}
		return nil
	})
	until(t, "nothing of kube-proxy's is left on the node (--cleanup-kube-proxy)", func() error { return kubeProxyLeft(t, n.ns) })
	if err := echoes(connA, "a3"); err != nil {
		t.Fatalf("connection A, opened through kube-proxy, after kube-proxy's rules were removed and cnibox's proxy took over: %v", err)
	}
	until(t, fmt.Sprintf("a new connection through %v (cnibox's DNAT) echoes", cip), fresh)
	connB, err := dialFrom(t, client, cip)
	must(t, err)
	defer connB.Close()
	must(t, echoes(connB, "b1"))

	// The way back: the agent stops (its table stays and serves),
	// kube-proxy comes back, cnibox's table is removed.
	n.stopAgent()
	must(t, echoes(connB, "b2"))
	startKubeProxy(t, kp, n, nodeCfg, mode) // (stopped when the test ends)
	until(t, "kube-proxy wrote its rules again", func() error {
		if len(kubeProxyTables(t, nh)) == 0 {
			return errors.New("none yet")
		}
		return nil
	})
	// (its first sync is whole: wait for its health to say so)
	until(t, "kube-proxy's /healthz answers 200", func() error {
		return getBody(t, n.ns, netip.MustParseAddrPort("127.0.0.1:10256"), "/healthz", "lastUpdated")
	})
	cmd := exec.Command(c.cniboxBin, "cleanup", "services")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	must(t, nstest.Run(t, n.ns, cmd.Run))
	if !strings.HasPrefix(out.String(), "removed table inet "+nft.ServicesTable) {
		t.Errorf("cnibox cleanup services said %q", out.String())
	}
	if _, ok := inServiceIPs4(t, n.ns, cip.Addr()); ok {
		t.Errorf("table inet %s is still there after cnibox cleanup services", nft.ServicesTable)
	}
	for conn, msg := range map[net.Conn]string{connA: "a4", connB: "b3"} {
		if err := echoes(conn, msg); err != nil {
			t.Errorf("after the way back to kube-proxy, connection %s: %v", msg[:1], err)
		}
	}
	until(t, fmt.Sprintf("a new connection through %v (kube-proxy's DNAT again) echoes", cip), fresh)
}

// kubeProxyBinary is kube-proxy v1.34.2, built once by control-plane.sh
// into its cache.
func kubeProxyBinary(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("bash", kube.Script(t), "build", "kube-proxy").Output()
	if err != nil {
		t.Fatalf("build kube-proxy (bash test/kube/control-plane.sh build kube-proxy): %v", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "kube-proxy")
}

// kubeProxyProc is a kube-proxy running in a node's namespace.
type kubeProxyProc struct {
	t    *testing.T
	cmd  *exec.Cmd
	done chan error
	log  string
}

// startKubeProxy runs kube-proxy in mode in n's namespace as its
// DaemonSet would (its own ports, 10256 and 10249), leaving the
// conntrack sysctls alone (0).
func startKubeProxy(t *testing.T, bin string, n *node, kubeconfig, mode string) *kubeProxyProc {
	t.Helper()
	log := filepath.Join(t.TempDir(), "kube-proxy.log")
	f, err := os.Create(log)
	must(t, err)
	cmd := exec.Command(bin, "--kubeconfig="+kubeconfig, "--hostname-override="+n.name, "--proxy-mode="+mode,
		"--cluster-cidr=10.244.0.0/16", "--conntrack-max-per-core=0", "--conntrack-min=0",
		"--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0",
		"--conntrack-udp-timeout=0", "--conntrack-udp-timeout-stream=0")
	cmd.Stdout, cmd.Stderr = f, f
	if err := startIn(t, n.ns, cmd); err != nil {
		f.Close()
		t.Fatalf("start kube-proxy: %v", err)
	}
	p := &kubeProxyProc{t: t, cmd: cmd, done: make(chan error, 1), log: log}
	go func() { p.done <- cmd.Wait(); f.Close() }()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			b, _ := os.ReadFile(log)
			t.Logf("kube-proxy log (last run):\n%s", b)
		}
	})
	return p
}

// stop ends kube-proxy with SIGTERM (as the kubelet does when its pod
// goes) and waits for it.
func (p *kubeProxyProc) stop() {
	if p.cmd == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
	p.cmd = nil
}

// kubeProxyTables are kube-proxy's tables or chains as doctor sees them.
func kubeProxyTables(t *testing.T, h *netops.Handle) []string {
	t.Helper()
	kp, err := h.NFT().KubeProxyTables()
	must(t, err)
	return kp
}

// kubeProxyLeft reads every table and chain of the namespace at ns and
// says what of kube-proxy's is there: a table called kube-proxy, or a
// KUBE-* chain other than the kubelet's (KUBE-FIREWALL,
// KUBE-KUBELET-CANARY), which `kube-proxy --cleanup` leaves.
func kubeProxyLeft(t *testing.T, ns string) error {
	f, err := os.Open(ns)
	must(t, err)
	defer f.Close()
	conn, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	must(t, err)
	defer conn.CloseLasting()
	tables, err := conn.ListTables()
	must(t, err)
	var left []string
	for _, tb := range tables {
		if tb.Name == "kube-proxy" {
			left = append(left, fmt.Sprintf("table %v kube-proxy", tb.Family))
		}
	}
	chains, err := conn.ListChains()
	must(t, err)
	for _, ch := range chains {
		if strings.HasPrefix(ch.Name, "KUBE-") && ch.Name != "KUBE-FIREWALL" && ch.Name != "KUBE-KUBELET-CANARY" {
			left = append(left, fmt.Sprintf("chain %v %s %s", ch.Table.Family, ch.Table.Name, ch.Name))
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("still there: %s", strings.Join(left, ", "))
	}
	return nil
}

// serveEcho echoes what each TCP connection to ap (in the namespace at
// ns) sends, for as long as the connection lasts.
func serveEcho(t *testing.T, ns string, ap netip.AddrPort) {
	var ln net.Listener
	must(t, nstest.Run(t, ns, func() (err error) { ln, err = net.Listen("tcp", ap.String()); return err }))
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
}

// dialFrom opens a TCP connection from the namespace at ns to to.
func dialFrom(t *testing.T, ns string, to netip.AddrPort) (net.Conn, error) {
	var c net.Conn
	err := nstest.Run(t, ns, func() (err error) { c, err = net.DialTimeout("tcp", to.String(), 2*time.Second); return err })
	return c, err
}

// echoes sends msg on c and wants it back.
func echoes(c net.Conn, msg string) error {
	if err := c.SetDeadline(time.Now().Add(3 * time.Second)); err != nil {
		return err
	}
	if _, err := io.WriteString(c, msg); err != nil {
		return fmt.Errorf("send %q: %w", msg, err)
	}
	b := make([]byte, len(msg))
	if _, err := io.ReadFull(c, b); err != nil {
		return fmt.Errorf("echo of %q: %w", msg, err)
	}
	if string(b) != msg {
		return fmt.Errorf("echo of %q: %q", msg, b)
	}
	return nil
}
