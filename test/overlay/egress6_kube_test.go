//go:build kube

package overlay

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cnibox/cnibox/agent/egress"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/test/kube"
)

// The cluster of TestKubeEgressIPv6Only (and of its dual-stack twin,
// TestKubeEgressVXLANDualStack): the underlay's IPv6
// network 2001:db8:77::/64 (node<i> at ::1<i>, the server outside the
// cluster at ::100 on the underlay's bridge), the pods in
// fd00:10:244::/56 (a /64 each node, from the node IPAM controller),
// carried between the nodes by vxlan over IPv6 (flannel-v6.1).
var (
	egress6IP     = netip.MustParseAddr("2001:db8:77::50")
	egress6Server = netip.MustParseAddr("2001:db8:77::100")
)

// The net-conf.json of each test: IPv6 only, and dual stack.
const (
	v6OnlyNetConf = `{"EnableIPv4": false, "EnableIPv6": true, "IPv6Network": "fd00:10:244::/56", "Backend": {"Type": "vxlan"}}`
	dualNetConf   = `{"Network": "10.244.0.0/16", "EnableIPv6": true, "IPv6Network": "fd00:10:244::/56", "Backend": {"Type": "vxlan"}}`
)

func underlay6(i int) netip.Addr { return netip.MustParseAddr(fmt.Sprintf("2001:db8:77::%d", 10+i)) }

// seen6 is the source the server at srv sees a connection from the
// namespace ns come from; the zero Addr when it cannot connect within 2 s.
func seen6(t *testing.T, ns string, srv netip.AddrPort) netip.Addr {
	var got netip.Addr
	_ = nstest.Run(t, ns, func() error {
		c, err := net.DialTimeout("tcp", srv.String(), 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
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

// waitSeen6 waits (a minute at most) until p's connections to srv are
// seen from want.
func waitSeen6(t *testing.T, c *cluster, what string, p *pod, srv netip.AddrPort, want netip.Addr) {
	t.Helper()
	var got netip.Addr
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if got = seen6(t, p.ns, srv); got == want {
			return
		}
	}
	var nss []string
	for _, n := range c.nodes {
		nss = append(nss, n.ns)
	}
	t.Fatalf("%s: the server sees %v, want %v\n%s", what, got, want, netDump(append(nss, p.ns)...))
}

// holders6 are the nodes whose uplink holds the IPv6 egress address.
func holders6(t *testing.T, c *cluster) []string {
	var out []string
	for _, n := range c.nodes {
		h, err := netops.Open(n.ns)
		if err != nil {
			t.Errorf("%s: %v", n.name, err)
			continue
		}
		ps, err := h.Addrs("eth0")
		h.Close()
		if err == nil && slices.Contains(ps, netip.PrefixFrom(egress6IP, 128)) {
			out = append(out, n.name)
		}
	}
	return out
}

// waitHolder6 waits until one node other than not holds the address and
// the gateway's status names it, Ready; it returns that node.
func waitHolder6(t *testing.T, c *cluster, cs kubernetes.Interface, not string) *node {
	t.Helper()
	var hs []string
	var g egress.EgressGateway
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if hs = holders6(t, c); len(hs) != 1 || hs[0] == not {
			continue
		}
		b, err := cs.CoreV1().RESTClient().Get().AbsPath("/apis/cnibox.io/v1alpha1/egressgateways/gw6").DoRaw(context.Background())
		must(t, err)
		must(t, json.Unmarshal(b, &g))
		ready := slices.ContainsFunc(g.Status.Conditions, func(c metav1.Condition) bool { return c.Type == "Ready" && c.Status == metav1.ConditionTrue })
		if ready && slices.Equal(g.Status.EgressIPs, []egress.HeldIP{{EgressIP: egress6IP.String(), Node: hs[0]}}) {
			return c.nodes[slices.IndexFunc(c.nodes, func(n *node) bool { return n.name == hs[0] })]
		}
	}
	t.Fatalf("after a minute: %s held by %v, the gateway's status %+v; want one node but %q, named Ready in the status", egress6IP, hs, g.Status, not)
	return nil
}

// lanNeigh is the MAC that h's underlay link (ul0) has for a ("" when it
// has no entry or none with an address).
func lanNeigh(t *testing.T, h *netops.Handle, a netip.Addr) string {
	t.Helper()
	ns, err := h.Neighs("ul0")
	must(t, err)
	for _, n := range ns {
		if n.IP == a && n.MAC != nil {
			return n.MAC.String()
		}
	}
	return ""
}

// macOf is node n's dev's MAC.
func macOf(t *testing.T, n *node, dev string) string {
	t.Helper()
	h, err := netops.Open(n.ns)
	must(t, err)
	defer h.Close()
	l, err := h.LinkByName(dev)
	must(t, err)
	return l.MAC.String()
}

// TestKubeEgressIPv6Only: egress gateways on a single-stack IPv6 cluster
// (net-conf.json with EnableIPv4 false, issue 64) with the vxlan backend
// over IPv6, the agents the real binary with --kube-subnet-mgr: an
// EgressGateway with an IPv6 address is served as an IPv4 one is. A
// selected pod on a node that may not hold the address (node3) leaves
// from the address, its traffic carried over vxlan's IPv6 overlay to the
// holder; a selected pod on the holder's node too; an unselected pod
// leaves from its node's address (the overlay's IPv6 masquerade). The
// address is on one node's uplink at a time, and one MAC answers a
// neighbour solicitation for it from the underlay (checked every 10 ms
// throughout); the gateway's status names the holder. The holder's death
// (its agent SIGKILLed, its uplink down) moves the address to the other
// eligible node, whose unsolicited neighbour advertisement updates a LAN
// host's entry for it, and the pods follow; the gateway deleted: the pods leave
// from their node again, no address, rule or route left.
func TestKubeEgressIPv6Only(t *testing.T) { egressOverVXLAN6(t, false) }

// TestKubeEgressVXLANDualStack: TestKubeEgressIPv6Only's IPv6 egress
// address on a dual-stack vxlan cluster (flannel.1 and flannel-v6.1, the
// pods with both families): a pod's IPv6 traffic crosses to the holder
// over vxlan's IPv6 overlay, beside the IPv4 one.
func TestKubeEgressVXLANDualStack(t *testing.T) { egressOverVXLAN6(t, true) }

func egressOverVXLAN6(t *testing.T, dual bool) {
	c := newCluster(t, 3)
	c.v6Only = !dual
	c.kcpArgs = []string{"fd00:10:244::/56", "64"}
	conf, key := v6OnlyNetConf, "flannel-v6.1" // (the store's key: the network's first device)
	if dual {
		c.kcpArgs = []string{"10.244.0.0/16,fd00:10:244::/56", "24"}
		conf, key = dualNetConf, device
	}
	c.flannelConf() // (the manifest's conflist: the pods' default route via their bridge)
	ul := openH(t, c.underlay)
	nodad := netops.AddrOpts{NoDAD: true}
	must(t, ul.EnsureAddr("br0", netip.MustParsePrefix("2001:db8:77::1/64"), nodad))
	must(t, ul.EnsureAddr("br0", netip.PrefixFrom(egress6Server, 64), nodad))
	srv := nstest.Serve(t, c.underlay, egress6Server)
	for i, n := range c.nodes {
		h := openH(t, n.ns)
		must(t, h.EnsureAddr("eth0", netip.PrefixFrom(underlay6(i+1), 64), nodad))
		// (an IPv6 node forwards, as kubeadm requires of it: the agent
		// reads IPv6 forwarding and never sets it)
		must(t, h.SetSysctl("net.ipv6.conf.all.forwarding", "1"))
	}

	// (the Services' range stays the control plane's IPv4 default: the
	// API server advertises 127.0.0.1, and the node IPAM controller
	// gives each node an IPv6 podCIDR out of the cluster CIDR)
	cs, nodeCfg := c.startControlPlane()
	netConf := filepath.Join(t.TempDir(), "net-conf.json")
	must(t, os.WriteFile(netConf, []byte(conf), 0o644))
	c.agentArgs = func(n *node) []string {
		return []string{"--kube-subnet-mgr", "--kubeconfig-file", nodeCfg, "--net-config-path", netConf, "--node-name", n.name}
	}
	ctx := context.Background()
	crd, err := os.ReadFile("../../deploy/kubernetes/egressgateway-crd.yaml")
	must(t, err)
	kube.CreateCRD(t, cs, crd, "/apis/cnibox.io/v1alpha1/egressgateways")
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: egress.LeaseNamespace}}, metav1.CreateOptions{})
	must(t, err)
	_, err = cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		must(t, err)
	}
	for i, n := range c.nodes {
		_, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name,
			Labels: map[string]string{"egress": fmt.Sprint(i < 2)}}}, metav1.CreateOptions{})
		must(t, err)
	}
	for _, n := range c.nodes {
		n.startAgent()
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range c.nodes {
				t.Logf("agent log of %s:\n%s", n.name, n.log())
			}
		}
	})
	// The overlay: each agent holds an IPv6 lease on flannel-v6.1, and
	// nothing of IPv4.
	for _, n := range c.nodes {
		eventually(t, n.name+"'s overlay ready", func() string {
			s, ok := n.stateOf(key)
			if ok && s.Ready && s.Lease.Subnet6.IsValid() && s.Lease.Subnet.IsValid() == dual && s.Lease.Device6 == "flannel-v6.1" {
				return ""
			}
			return fmt.Sprintf("store: %+v (found %v)", s, ok)
		})
	}

	pods := map[string]*pod{}
	for _, p := range []struct {
		name   string
		node   *node
		labels map[string]string
	}{
		{"a1", c.nodes[0], map[string]string{"app": "egress"}},
		{"a3", c.nodes[2], map[string]string{"app": "egress"}},
		{"b3", c.nodes[2], map[string]string{"app": "other"}},
	} {
		pd, err := p.node.addPod(p.name)
		if err != nil {
			t.Fatalf("ADD %s on %s: %v\nagent log:\n%s", p.name, p.node.name, err, p.node.log())
		}
		if pd.ip.IsValid() != dual || !pd.ip6.IsValid() {
			t.Fatalf("%s: ADD gave %v and %v; want an IPv6 address (and an IPv4 one: %v)", p.name, pd.ip, pd.ip6, dual)
		}
		pods[p.name] = pd
		o, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.name, Labels: p.labels},
			Spec:       corev1.PodSpec{NodeName: p.node.name, Containers: []corev1.Container{{Name: "c", Image: "x"}}},
		}, metav1.CreateOptions{})
		must(t, err)
		o.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: pd.ip6.String(), PodIPs: []corev1.PodIP{{IP: pd.ip6.String()}}}
		if dual {
			o.Status.PodIP, o.Status.PodIPs = pd.ip.String(), append([]corev1.PodIP{{IP: pd.ip.String()}}, o.Status.PodIPs...)
		}
		_, err = cs.CoreV1().Pods("default").UpdateStatus(ctx, o, metav1.UpdateOptions{})
		must(t, err)
	}
	// The pods reach each other over the IPv6 overlay.
	a1, a3, b3 := pods["a1"], pods["a3"], pods["b3"]
	for _, pair := range [][2]*pod{{a3, a1}, {a1, a3}} {
		to := *pair[1]
		to.ip = to.ip6
		eventually(t, pair[0].id+" reaches "+to.id+" over IPv6", func() string {
			if err := reachable(t, pair[0], &to); err != nil {
				return err.Error()
			}
			return ""
		})
	}
	// Before any gateway, the pods leave from their node's address.
	waitSeen6(t, c, "a3 before the gateway", a3, srv, underlay6(3))

	stop := nstest.WatchOneHolder(t, nstest.NewNDPProber(t, c.underlay, "br0"), egress6IP, 10*time.Millisecond, func() []string { return holders6(t, c) })
	defer stop()
	gw := `{"apiVersion":"cnibox.io/v1alpha1","kind":"EgressGateway","metadata":{"name":"gw6"},
		"spec":{"podSelector":{"matchLabels":{"app":"egress"}},"egressIPs":["` + egress6IP.String() + `"],"nodeSelector":{"matchLabels":{"egress":"true"}}}}`
	must(t, cs.CoreV1().RESTClient().Post().AbsPath("/apis/cnibox.io/v1alpha1/egressgateways").
		Body([]byte(gw)).SetHeader("Content-Type", "application/json").Do(ctx).Error())

	waitSeen6(t, c, "a3 (node3, selected: over vxlan to the holder)", a3, srv, egress6IP)
	waitSeen6(t, c, "a1 (node1, selected)", a1, srv, egress6IP)
	waitSeen6(t, c, "b3 (node3, not selected)", b3, srv, underlay6(3))
	holder := waitHolder6(t, c, cs, "")
	if holder.name == "node3" {
		t.Fatal("node3 holds the address: it is not labelled egress=true")
	}

	// A host of the LAN (the test's own namespace, on the underlay's
	// bridge) that knows the address's MAC learns the new holder's from
	// its unsolicited neighbour advertisement, without asking.
	self := openH(t, "")
	must(t, self.EnsureAddr("ul0", netip.MustParsePrefix("2001:db8:77::254/64"), nodad))
	if conn, err := net.DialTimeout("tcp", netip.AddrPortFrom(egress6IP, 9).String(), 2*time.Second); err == nil {
		conn.Close() // (refused: the neighbour entry is what it is for)
	}
	if mac := lanNeigh(t, self, egress6IP); mac != macOf(t, holder, "eth0") {
		t.Fatalf("the LAN host resolves %s to %v, want %s's %v", egress6IP, mac, holder.name, macOf(t, holder, "eth0"))
	}

	// The holder dies: its agent SIGKILLed, its uplink down.
	old := holder
	old.agent.Process.Kill()
	<-old.agentDone
	old.agent = nil
	must(t, openH(t, old.ns).SetLinkDown("eth0"))
	holder = waitHolder6(t, c, cs, old.name)
	t.Logf("%s died: %s holds %s", old.name, holder.name, egress6IP)
	eventually(t, "the LAN host's neighbour entry of "+egress6IP.String()+" (an unsolicited advertisement from "+holder.name+")", func() string {
		if mac := lanNeigh(t, self, egress6IP); mac != macOf(t, holder, "eth0") {
			return fmt.Sprintf("%v, want %s's %v", mac, holder.name, macOf(t, holder, "eth0"))
		}
		return ""
	})
	waitSeen6(t, c, "a3 after "+old.name+"'s death", a3, srv, egress6IP)

	// The gateway deleted: back to the node's address, nothing left on
	// the living nodes.
	must(t, cs.CoreV1().RESTClient().Delete().AbsPath("/apis/cnibox.io/v1alpha1/egressgateways/gw6").Do(ctx).Error())
	waitSeen6(t, c, "a3 after the gateway's deletion", a3, srv, underlay6(3))
	for _, n := range c.nodes {
		if n == old {
			continue
		}
		h := openH(t, n.ns)
		eventually(t, n.name+": no egress left", func() string {
			var left []string
			if rules, err := h.NFT().EgressRules(); err != nil || len(rules) > 0 {
				left = append(left, fmt.Sprintf("rules %q (%v)", rules, err))
			}
			if routes, err := h.EgressRoutes(); err != nil || len(routes) > 0 {
				left = append(left, fmt.Sprintf("routes %v (%v)", routes, err))
			}
			if hs := holders6(t, c); len(hs) > 0 {
				left = append(left, fmt.Sprintf("the address on %v", hs))
			}
			return strings.Join(left, "; ")
		})
	}
}
