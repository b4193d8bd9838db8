package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"

	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/store"
	"github.com/cnibox/cnibox/test/internal/benchnode"
	"github.com/cnibox/cnibox/test/internal/flanneld"
	"github.com/cnibox/cnibox/test/internal/policyload"
	"github.com/cnibox/cnibox/test/internal/upstream"
)

// The ports the pods serve: iperf3's, netload's (RR and CRR) and one no
// policy allows (the policies' check).
const (
	iperfPort  = 5201
	loadPort   = 5301
	closedPort = 5302
)

// anchorDirs are flanneld's directory and the reference plugins'
// (found through the environment the parent set).
func anchorDirs() ([2]string, error) {
	fdir, err := flanneld.Dir()
	if err != nil {
		return [2]string{}, err
	}
	pdir, err := upstream.Plugins(refPlugins...)
	return [2]string{fdir, pdir}, err
}

// pair is one measured path: from the namespace cli to ip in srv.
type pair struct {
	kind     string
	cli, srv string // namespace paths
	ip       netip.Addr
}

// instance is one configuration set up: its namespaces, agents, pods and
// API objects, all removed by close.
type instance struct {
	e        *env
	c        config
	seq      int
	dir      string
	nss      []string // named namespaces
	veths    []string // host ends on the underlay bridge
	procs    []*benchnode.Proc
	servers  []*exec.Cmd
	nodes    []*node
	kubeNS   string
	apiNodes []string
}

// node is a node namespace with its agent.
type node struct {
	*benchnode.NS
	name       string // the Node object's
	ip         netip.Addr
	dir        string
	subnetFile string
	agent      *benchnode.Proc
	routes     *benchnode.PeerRoutes
	cni        *libcni.CNIConfig
	list       *libcni.NetworkConfigList
}

// run sets c up, measures its pairs and takes it down.
func (e *env) run(c config) (map[string]*sample, error) {
	e.seq++
	in := &instance{e: e, c: c, seq: e.seq, dir: filepath.Join(e.dir, fmt.Sprintf("%d-%s", e.seq, c.name))}
	defer in.close()
	if err := os.MkdirAll(in.dir, 0o755); err != nil {
		return nil, err
	}
	var pairs []pair
	var err error
	if c.kind == floorKind {
		pairs, err = in.upFloor()
	} else {
		pairs, err = in.upOverlay()
	}
	if err != nil {
		return nil, err
	}
	if e.o.pathState != "" {
		file, err := in.pathState(pairs)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(os.Stderr, "%s: path state in %s\n", c.name, file)
	}
	out := map[string]*sample{}
	for _, p := range pairs {
		s, err := in.measure(p)
		if err != nil {
			return out, fmt.Errorf("%s: %w", p.kind, err)
		}
		out[p.kind] = s
	}
	return out, in.stillRunning()
}

func (in *instance) logf(format string, args ...any) {
	in.e.o.logf("%s: "+format, append([]any{in.c.name}, args...)...)
}

// nsName names a namespace of this instance (the process ID keeps two runs
// on one machine apart: /run/netns is the machine's).
func (in *instance) nsName(what string) string {
	return fmt.Sprintf("dpb%d-%d-%s", os.Getpid(), in.seq, what)
}

func (in *instance) newNS(what string) (string, *netops.Handle, error) {
	name := in.nsName(what)
	path, err := netops.CreateNamedNS(name)
	if err != nil {
		return "", nil, err
	}
	in.nss = append(in.nss, name)
	h, err := netops.Open(path)
	if err != nil {
		return path, nil, err
	}
	return path, h, h.SetLinkUp("lo")
}

// newNode makes node i's namespace on the underlay.
func (in *instance) newNode(i int) (*node, error) {
	n := &node{name: fmt.Sprintf("dp%d-n%d", in.seq, i), ip: netip.AddrFrom4([4]byte{10, 77, byte(in.seq), byte(i + 1)})}
	n.dir = filepath.Join(in.dir, n.name)
	n.subnetFile = filepath.Join(n.dir, "subnet.env")
	if err := os.MkdirAll(n.dir, 0o755); err != nil {
		return nil, err
	}
	veth := fmt.Sprintf("dp%dn%d", in.seq, i)
	ns, err := benchnode.NewNS(in.nsName(fmt.Sprintf("n%d", i)), benchnode.Wire{
		Host: in.e.h, HostVeth: veth, Bridge: underlayBridge, Addr: netip.PrefixFrom(n.ip, 16),
	})
	if ns != nil {
		n.NS = ns
		in.nss = append(in.nss, ns.Name)
		in.veths = append(in.veths, veth)
		ns.H.Close()
		ns.H = nil
		in.nodes = append(in.nodes, n)
	}
	return n, err
}

// upFloor: two namespaces on a bare veth pair (same-node), two node
// namespaces over the underlay (cross-node).
func (in *instance) upFloor() ([]pair, error) {
	a, ha, err := in.newNS("va")
	if ha != nil {
		defer ha.Close()
	}
	if err != nil {
		return nil, err
	}
	b, hb, err := in.newNS("vb")
	if hb != nil {
		defer hb.Close()
	}
	if err != nil {
		return nil, err
	}
	if _, _, err := ha.EnsureVeth(netops.VethOpts{HostName: "eth0", PeerName: "eth0", Peer: hb}); err != nil {
		return nil, err
	}
	addrs := [2]netip.Prefix{netip.MustParsePrefix("10.99.0.1/24"), netip.MustParsePrefix("10.99.0.2/24")}
	for i, h := range []*netops.Handle{ha, hb} {
		if err := h.EnsureAddr("eth0", addrs[i], netops.AddrOpts{NoDAD: true}); err != nil {
			return nil, err
		}
	}
	var nodes [2]*node
	for i := range nodes {
		if nodes[i], err = in.newNode(i); err != nil {
			return nil, err
		}
	}
	for _, srv := range []string{b, nodes[1].Path} {
		if err := in.serve(srv); err != nil {
			return nil, err
		}
	}
	return []pair{
		{kind: sameNode, cli: a, srv: b, ip: addrs[1].Addr()},
		{kind: crossNode, cli: nodes[0].Path, srv: nodes[1].Path, ip: nodes[1].ip},
	}, nil
}

// upOverlay: two nodes on the control plane with the side's agent, pods
// a and b on node 0 and c on node 1 through the side's conflist, as Pod
// objects Running with their addresses; with c.policies, the policies and
// the namespace's flow log, checked to be in force.
func (in *instance) upOverlay() ([]pair, error) {
	e := in.e
	ctx := e.ctx
	in.kubeNS = fmt.Sprintf("dp-%d", in.seq)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: in.kubeNS}}
	if in.c.policies {
		ns.Annotations = map[string]string{policy.FlowLogAnnotation: "deny"}
	}
	if _, err := e.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	// The service account admission wants it; no controller makes it here.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := e.cs.CoreV1().ServiceAccounts(in.kubeNS).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	for i := range 2 {
		n, err := in.newNode(i)
		if err != nil {
			return nil, err
		}
		if err := in.apiNode(n); err != nil {
			return nil, err
		}
		if n.routes, err = watchRoutes(ctx, n); err != nil {
			return nil, err
		}
	}
	conf := filepath.Join(in.dir, "net-conf.json")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`{"Network": %q, "Backend": {"Type": %q}}`, clusterCIDR, in.c.backend)), 0o644); err != nil {
		return nil, err
	}
	for _, n := range in.nodes {
		if err := in.startAgent(n, conf); err != nil {
			return nil, err
		}
	}
	for _, n := range in.nodes {
		err := e.waitFor(n.name+"'s agent: subnet file and the peer's route", e.o.timeout, func() (bool, error) {
			if ended, err := n.agent.Exited(); ended {
				return false, fmt.Errorf("the agent ended: %v\n%s", err, n.agent.LogTail(2000))
			}
			_, err := os.Stat(n.subnetFile)
			t, _ := n.routes.Complete()
			return err == nil && !t.IsZero(), nil
		})
		if err != nil {
			return nil, fmt.Errorf("%w\n%s", err, n.agent.LogTail(2000))
		}
	}
	in.logf("agents up")
	pods := map[string]netip.Addr{}
	var paths = map[string]string{}
	for _, p := range []struct {
		name string
		n    *node
	}{{"a", in.nodes[0]}, {"b", in.nodes[0]}, {"c", in.nodes[1]}} {
		path, ip, err := in.addPod(p.n, p.name)
		if err != nil {
			return nil, fmt.Errorf("pod %s on %s: %w", p.name, p.n.name, err)
		}
		pods[p.name], paths[p.name] = ip, path
	}
	in.logf("pods a %s, b %s, c %s", pods["a"], pods["b"], pods["c"])
	for _, p := range []string{"b", "c"} {
		if err := in.serve(paths[p]); err != nil {
			return nil, err
		}
	}
	if in.c.policies {
		if err := in.addPolicies(); err != nil {
			return nil, err
		}
		if err := in.checkPolicies(paths["a"], pods["c"]); err != nil {
			return nil, err
		}
	}
	return []pair{
		{kind: sameNode, cli: paths["a"], srv: paths["b"], ip: pods["b"]},
		{kind: crossNode, cli: paths["a"], srv: paths["c"], ip: pods["c"]},
	}, nil
}

func watchRoutes(ctx context.Context, n *node) (*benchnode.PeerRoutes, error) {
	h, err := netops.Open(n.Path)
	if err != nil {
		return nil, err
	}
	// The watch keeps its own socket; the handle may go.
	defer h.Close()
	return benchnode.WatchPeerRoutes(ctx, h, clusterNet, 1)
}

// apiNode creates n's Node object, Ready with its address, and waits for
// the node IPAM controller to give it a pod CIDR.
func (in *instance) apiNode(n *node) error {
	e := in.e
	// An annotation a kubelet writes on registering: flanneld v0.28.9
	// panics on a Node that has none (it writes into the nil map).
	obj, err := e.cs.CoreV1().Nodes().Create(e.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name,
		Annotations: map[string]string{"volumes.kubernetes.io/controller-managed-attach-detach": "true"}}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	in.apiNodes = append(in.apiNodes, n.name)
	// The node IPAM controller writes the node meanwhile: read it again
	// on a conflict.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.ip.String()}, {Type: corev1.NodeHostName, Address: n.name}}
		obj.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		_, err := e.cs.CoreV1().Nodes().UpdateStatus(e.ctx, obj, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			if fresh, gerr := e.cs.CoreV1().Nodes().Get(e.ctx, n.name, metav1.GetOptions{}); gerr == nil {
				obj = fresh
			}
		}
		return err
	})
	if err != nil {
		return err
	}
	return e.waitFor(n.name+"'s pod CIDR", e.o.timeout, func() (bool, error) {
		got, err := e.cs.CoreV1().Nodes().Get(e.ctx, n.name, metav1.GetOptions{})
		return err == nil && got.Spec.PodCIDR != "", err
	})
}

// startAgent runs the side's agent on n, as the side's manifest runs it.
func (in *instance) startAgent(n *node, conf string) error {
	var bin string
	var args []string
	switch in.c.kind {
	case flannelKind:
		dirs, err := anchorDirs()
		if err != nil {
			return err
		}
		bin = filepath.Join(dirs[0], "flanneld")
		args = []string{"--ip-masq", "--kube-subnet-mgr", "--kubeconfig-file=" + in.e.kc, "--net-config-path=" + conf,
			"--iface=eth0", "--subnet-file=" + n.subnetFile}
	default:
		bin = in.e.o.agent
		args = []string{"--kube-subnet-mgr", "--ip-masq", "--kubeconfig-file", in.e.kc, "--net-config-path", conf,
			"--iface", "eth0", "--subnet-file", n.subnetFile, "--data-dir", n.dir, "--flow-log-file", flowLog(n)}
	}
	p, err := benchnode.Start(benchnode.StartOpts{Bin: bin, Args: args, Env: []string{"NODE_NAME=" + n.name},
		Log: filepath.Join(n.dir, "agent.log"), NS: n.Path})
	if err != nil {
		return err
	}
	n.agent = p
	in.procs = append(in.procs, p)
	return nil
}

// flowLog is the flow log of n's agent.
func flowLog(n *node) string { return filepath.Join(n.dir, "flows.log") }

// conflist is flannel's (kube-flannel.yml's cni-conf.json, which
// cnibox's manifest keeps): the flannel plugin delegating to bridge with
// host-local, then portmap. The anchor's host-local keeps its
// reservations in the node's directory, not the machine's
// /var/lib/cni/networks.
func (in *instance) conflist(n *node) string {
	ipam := ""
	if in.c.kind == flannelKind {
		ipam = fmt.Sprintf(`"ipam": {"type": "host-local", "dataDir": %q},`, filepath.Join(n.dir, "ipam"))
	}
	return fmt.Sprintf(`{"cniVersion": "0.3.1", "name": "cbr0", "plugins": [
		{"type": "flannel", "subnetFile": %q, "dataDir": %q, %s
		 "delegate": {"hairpinMode": true, "isDefaultGateway": true}},
		{"type": "portmap", "capabilities": {"portMappings": true}}]}`, n.subnetFile, filepath.Join(n.dir, "flannel"), ipam)
}

// addPod makes pod name's namespace, runs the conflist's ADD for it on n
// as a kubelet would (the plugins started in n's namespace) and creates
// its Pod object, Running with the address.
func (in *instance) addPod(n *node, name string) (string, netip.Addr, error) {
	e := in.e
	path, h, err := in.newNS("p" + name)
	if h != nil {
		h.Close()
	}
	if err != nil {
		return "", netip.Addr{}, err
	}
	if n.cni == nil {
		dir, err := e.pluginDir(in.c.kind)
		if err != nil {
			return "", netip.Addr{}, err
		}
		n.cni = libcni.NewCNIConfigWithCacheDir([]string{dir}, filepath.Join(n.dir, "cni-cache"), nil)
		if n.list, err = libcni.ConfListFromBytes([]byte(in.conflist(n))); err != nil {
			return "", netip.Addr{}, err
		}
	}
	rt := &libcni.RuntimeConf{ContainerID: in.nsName("p" + name), NetNS: path, IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", in.kubeNS}, {"K8S_POD_NAME", name}}}
	var res *current.Result
	err = onNode(n, in.c.kind == cniboxKind, func() error {
		r, err := n.cni.AddNetworkList(e.ctx, n.list, rt)
		if err == nil {
			res, err = current.NewResultFromResult(r)
		}
		return err
	})
	if err != nil {
		return "", netip.Addr{}, err
	}
	var ip netip.Addr
	for _, ipc := range res.IPs {
		if a, ok := netip.AddrFromSlice(ipc.Address.IP); ok && a.Unmap().Is4() {
			ip = a.Unmap()
		}
	}
	if !ip.IsValid() {
		return "", netip.Addr{}, fmt.Errorf("ADD result without an IPv4 address: %v", res)
	}
	p := policyload.Pod(in.kubeNS, name, n.name, map[string]string{"app": "dp"})
	if p, err = e.cs.CoreV1().Pods(in.kubeNS).Create(e.ctx, p, metav1.CreateOptions{}); err != nil {
		return "", netip.Addr{}, err
	}
	policyload.Running(p, ip.String(), n.ip.String())
	if _, err := e.cs.CoreV1().Pods(in.kubeNS).UpdateStatus(e.ctx, p, metav1.UpdateOptions{}); err != nil {
		return "", netip.Addr{}, err
	}
	return path, ip, nil
}

// onNode runs a libcni call with the plugins started in n's namespace;
// cnibox's use the node's store and log next to it, not the machine's.
func onNode(n *node, cnibox bool, fn func() error) error {
	if cnibox {
		os.Setenv(store.EnvDataDir, n.dir)
		defer os.Unsetenv(store.EnvDataDir)
		os.Setenv("CNIBOX_LOG_FILE", filepath.Join(n.dir, "cnibox.log"))
		defer os.Unsetenv("CNIBOX_LOG_FILE")
	}
	return netops.InNetns(n.Path, fn)
}

// serve starts the netload server in the namespace at path: this program
// again, serving loadPort and closedPort until it is stopped.
func (in *instance) serve(path string) error {
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d,%d", serveEnv, loadPort, closedPort))
	if in.e.o.pin {
		cmd.Env = append(cmd.Env, fmt.Sprintf("%s=%d", serveCPUEnv, serverCPU))
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := netops.InNetns(path, cmd.Start); err != nil {
		return fmt.Errorf("netload server: %w", err)
	}
	in.servers = append(in.servers, cmd)
	return nil
}

// reach waits until a connection from cli reaches ip:port (the server has
// started and the path is up, policies and all).
func (in *instance) reach(cli string, ip netip.Addr, port uint16) error {
	to := netip.AddrPortFrom(ip, port)
	return in.e.waitFor(fmt.Sprintf("a connection to %s", to), in.e.o.timeout, func() (bool, error) {
		c, err := dialFrom(cli, to, time.Second)
		if err != nil {
			return false, nil
		}
		c.Close()
		return true, nil
	})
}

func dialFrom(ns string, to netip.AddrPort, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := netops.InNetns(ns, func() error {
		var err error
		c, err = net.DialTimeout("tcp", to.String(), timeout)
		return err
	})
	return c, err
}

// addPolicies creates -policies NetworkPolicies selecting the pods and
// waits until both nodes' tables hold them, unchanged for 2 s.
func (in *instance) addPolicies() error {
	e := in.e
	n := e.o.policies
	if err := policyload.Parallel(8, n, func(k int) error {
		_, err := e.cs.NetworkingV1().NetworkPolicies(in.kubeNS).Create(e.ctx, dpPolicy(k, n), metav1.CreateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("policies: %w", err)
	}
	for _, nd := range in.nodes {
		last, since := -1, time.Now()
		err := e.waitFor(fmt.Sprintf("%d policies on %s", n, nd.name), e.o.timeout, func() (bool, error) {
			k, err := policyChains(nd.Path)
			if err != nil {
				return false, err
			}
			if k != last {
				last, since = k, time.Now()
			}
			return k >= n && time.Since(since) >= 2*time.Second, nil
		})
		if err != nil {
			return fmt.Errorf("%w\n%s", err, nd.agent.LogTail(2000))
		}
	}
	in.logf("%d policies in both nodes' tables", n)
	return nil
}

// checkPolicies: a port no policy allows is closed from pod a to pod c,
// and the flow log of a's node records it.
func (in *instance) checkPolicies(a string, c netip.Addr) error {
	if err := in.reach(a, c, loadPort); err != nil {
		return err
	}
	if conn, err := dialFrom(a, netip.AddrPortFrom(c, closedPort), time.Second); err == nil {
		conn.Close()
		return fmt.Errorf("the policies are not in force: port %d, which none allows, is open from pod a to pod c", closedPort)
	}
	return in.e.waitFor("the flow log's record of the refused connection", 10*time.Second, func() (bool, error) {
		b, err := os.ReadFile(flowLog(in.nodes[0]))
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return len(bytes.TrimSpace(b)) > 0, err
	})
}

// dpPolicy k of n: every one selects the pods (app=dp), both directions.
// The first n-1 allow TCP 10000+k from pods app=x(k) and to
// 192.0.2.(k%256)/32, which no packet of the bench matches; the last
// allows what the bench sends between the pods (iperf3's TCP and UDP,
// netload's port).
func dpPolicy(k, n int) *networkingv1.NetworkPolicy {
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	port := intstr.FromInt32(int32(10000 + k))
	ports := []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}}
	in := []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("x%d", k)}}}}
	out := []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: fmt.Sprintf("192.0.2.%d/32", k%256)}}}
	if k == n-1 {
		iperf, load := intstr.FromInt32(iperfPort), intstr.FromInt32(loadPort)
		ports = []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &iperf}, {Protocol: &udp, Port: &iperf}, {Protocol: &tcp, Port: &load}}
		dp := []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "dp"}}}}
		in, out = dp, dp
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("dp%03d", k)},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "dp"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: in, Ports: ports}},
			Egress:      []networkingv1.NetworkPolicyEgressRule{{To: out, Ports: ports}},
		},
	}
}

// stillRunning is an error if an agent ended during the measurements.
func (in *instance) stillRunning() error {
	for _, n := range in.nodes {
		if n.agent == nil {
			continue
		}
		if ended, err := n.agent.Exited(); ended {
			return fmt.Errorf("%s's agent ended: %v\n%s", n.name, err, n.agent.LogTail(2000))
		}
	}
	return nil
}

// close stops what the instance started and removes what it made.
func (in *instance) close() {
	e := in.e
	for _, s := range in.servers {
		s.Process.Signal(syscall.SIGTERM)
		s.Wait()
	}
	for _, p := range in.procs {
		p.Stop()
	}
	if in.kubeNS != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		zero := int64(0)
		e.cs.CoreV1().Pods(in.kubeNS).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		e.cs.NetworkingV1().NetworkPolicies(in.kubeNS).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		for _, name := range in.apiNodes {
			if err := e.cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				fmt.Fprintf(os.Stderr, "bench-datapath: delete node %s: %v\n", name, err)
			}
		}
	}
	for _, name := range in.nss {
		netops.DeleteNamedNS(name)
	}
	for _, v := range in.veths {
		e.h.DeleteLink(v)
	}
	if !strings.HasPrefix(in.dir, e.dir) {
		return
	}
	os.RemoveAll(in.dir)
}
