package main

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/test/internal/benchnode"
	"github.com/cnibox/cnibox/test/internal/policyload"
)

// The private namespace holds the underlay bridge (10.77.0.254/16) and the
// API server, bound to every address so that the node namespaces reach it
// over the bridge. Node i is 10.77.1.(i+1) with pod CIDR 10.(i+1).0.0/16.
const (
	underlayBridge = "bpbr0"
	rrNamespace    = "rr"
	rrPort         = 5201
	rrClosedPort   = 5202
)

var (
	// apiPort is control-plane.sh's (16443 unless $KCP_API_PORT moves it).
	apiPort    = cmp.Or(os.Getenv("KCP_API_PORT"), "16443")
	underlayGW = netip.MustParsePrefix("10.77.0.254/16")
	// the two request/response pods, on node 0's bridge
	rrAddrs = [2]netip.Addr{netip.MustParseAddr("10.1.0.10"), netip.MustParseAddr("10.1.0.11")}
)

func nodeName(i int) string   { return fmt.Sprintf("node-%d", i) }
func nodeIP(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 77, 1, byte(i + 1)}) }
func podCIDR(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i + 1), 0, 0}), 16)
}
func bridgeAddr(i int) netip.Prefix { return netip.PrefixFrom(podCIDR(i).Addr().Next(), 16) }

// podIP is the k-th bench pod address on node i (out of the bridge's and the
// request/response pods' 10.(i+1).0.0/24).
var podLabels = policyload.PodLabels

func podIP(i, k int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(i + 1), byte(1 + k/250), byte(2 + k%250)})
}

// cluster is the control plane and the API objects every side shares.
type cluster struct {
	o   *options
	dir string
	h   *netops.Handle
	cs  kubernetes.Interface
	kc  string // the kubeconfig the node namespaces use
	ctx context.Context

	next [8]atomic.Int64 // the next pod index per node
}

func newCluster(o *options) (*cluster, error) {
	dir, err := os.MkdirTemp("", "cnibox-bench-policy-")
	if err != nil {
		return nil, err
	}
	c := &cluster{o: o, dir: dir, ctx: context.Background()}
	if c.h, err = netops.Open(""); err != nil {
		return c, err
	}
	if _, err := c.h.EnsureBridge(netops.BridgeOpts{Name: underlayBridge}); err != nil {
		return c, err
	}
	if err := c.h.EnsureAddr(underlayBridge, underlayGW, netops.AddrOpts{NoDAD: true}); err != nil {
		return c, err
	}
	kcp := filepath.Join(dir, "kcp")
	cmd := exec.Command("bash", o.kcp, "start", kcp, "10.0.0.0/8", "16")
	cmd.Env = append(os.Environ(), "KCP_BIND=0.0.0.0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return c, fmt.Errorf("start the control plane: %v\n%s", err, out)
	}
	c.kc = filepath.Join(dir, "kubeconfig-nodes")
	if c.cs, err = benchnode.APIClients(kcp, c.kc, apiPort, underlayGW.Addr(), 1000); err != nil {
		return c, err
	}
	return c, c.populate()
}

func (c *cluster) close() {
	exec.Command("bash", c.o.kcp, "stop", filepath.Join(c.dir, "kcp")).Run()
	if c.h != nil {
		c.h.DeleteLink(underlayBridge)
		c.h.Close()
	}
	if os.Getenv("CNIBOX_BENCH_POLICY_KEEP") != "" { // the agents' logs, to read after a failure
		fmt.Fprintln(os.Stderr, "bench-policy: kept", c.dir)
		return
	}
	os.RemoveAll(c.dir)
}

func benchNS(i int) string { return fmt.Sprintf("bp%d", i) }

// populate creates the nodes, namespaces, pods and policies.
func (c *cluster) populate() error {
	o := c.o
	for i := range o.nodes {
		n := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: nodeName(i), Annotations: map[string]string{}},
			Spec:       corev1.NodeSpec{PodCIDR: podCIDR(i).String(), PodCIDRs: []string{podCIDR(i).String()}},
		}
		n, err := c.cs.CoreV1().Nodes().Create(c.ctx, n, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("node %d: %w", i, err)
		}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nodeIP(i).String()}, {Type: corev1.NodeHostName, Address: nodeName(i)}}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		if _, err := c.cs.CoreV1().Nodes().UpdateStatus(c.ctx, n, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("node %d status: %w", i, err)
		}
	}
	for i := range o.namespaces + 1 {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: rrNamespace}}
		if i < o.namespaces {
			ns = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNS(i), Labels: policyload.NamespaceLabels(i)}}
		}
		if _, err := c.cs.CoreV1().Namespaces().Create(c.ctx, ns, metav1.CreateOptions{}); err != nil {
			return err
		}
		// The service account admission wants it; no controller makes it here.
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
		if _, err := c.cs.CoreV1().ServiceAccounts(ns.Name).Create(c.ctx, sa, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if err := policyload.Parallel(16, o.pods, func(j int) error {
		_, err := c.runningPod(benchNS(j%o.namespaces), fmt.Sprintf("p%d", j), j)
		return err
	}); err != nil {
		return fmt.Errorf("pods: %w", err)
	}
	if err := policyload.Parallel(16, o.policies, func(k int) error {
		_, err := c.cs.NetworkingV1().NetworkPolicies(benchNS(k%o.namespaces)).Create(c.ctx, policyload.Policy(fmt.Sprintf("np%d", k), k, o.namespaces), metav1.CreateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("policies: %w", err)
	}
	for i, ip := range rrAddrs {
		p := policyload.Pod(rrNamespace, fmt.Sprintf("rr%d", i), nodeName(0), map[string]string{"app": "rr"})
		if _, err := c.createRunning(p, ip); err != nil {
			return err
		}
	}
	o.logf("API: %d nodes, %d pods, %d policies", o.nodes, o.pods, o.policies)
	return nil
}

// runningPod creates the j-th pod on node j % nodes, Running with its address.
func (c *cluster) runningPod(ns, name string, j int) (netip.Addr, error) {
	node := j % c.o.nodes
	ip := podIP(node, int(c.next[node].Add(1)-1))
	_, err := c.createRunning(policyload.Pod(ns, name, nodeName(node), podLabels(j, c.o.namespaces)), ip)
	return ip, err
}

func (c *cluster) createRunning(p *corev1.Pod, ip netip.Addr) (*corev1.Pod, error) {
	p, err := c.cs.CoreV1().Pods(p.Namespace).Create(c.ctx, p, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	return c.setRunning(p, ip)
}

// setRunning is the kubelet's status update of a started pod.
func (c *cluster) setRunning(p *corev1.Pod, ip netip.Addr) (*corev1.Pod, error) {
	policyload.Running(p, ip.String(), nodeIP(nodeIndex(p.Spec.NodeName)).String())
	return c.cs.CoreV1().Pods(p.Namespace).UpdateStatus(c.ctx, p, metav1.UpdateOptions{})
}

func nodeIndex(name string) int {
	var i int
	fmt.Sscanf(name, "node-%d", &i)
	return i
}

// rrPolicy k of n: every one selects both request/response pods, in both
// directions. The first n-1 allow TCP 10000+k from pods app=x(k) and to
// 192.0.2.k/32, which no packet of the bench matches; the last allows
// TCP 5201 between the two pods.
func rrPolicy(k, n int) *networkingv1.NetworkPolicy {
	tcp := corev1.ProtocolTCP
	port := intstr.FromInt32(int32(10000 + k))
	in := []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("x%d", k)}}}}
	out := []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: fmt.Sprintf("192.0.2.%d/32", k%256)}}}
	if k == n-1 {
		port = intstr.FromInt32(rrPort)
		rr := []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "rr"}}}}
		in, out = rr, rr
	}
	ports := []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("rr%03d", k)},
		Spec: networkingv1.NetworkPolicySpec{
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: in, Ports: ports}},
			Egress:      []networkingv1.NetworkPolicyEgressRule{{To: out, Ports: ports}},
		},
	}
}
