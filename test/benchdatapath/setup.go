package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/cni/libcni"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/test/internal/benchnode"
	"github.com/cnibox/cnibox/test/internal/flanneld"
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

// pair is one measured path: from the namespace cli to ip:port, served
// in srv (through a Service, ip:port is the Service's frontend).
type pair struct {
	kind     string
	cli, srv string // namespace paths
	ip       netip.Addr
	port     uint16 // 0: netload's port on the pod
}

// loadTo is where the pair's TCP_RR and TCP_CRR connect.
func (p pair) loadTo() netip.AddrPort {
	if p.port == 0 {
		return netip.AddrPortFrom(p.ip, loadPort)
	}
	return netip.AddrPortFrom(p.ip, p.port)
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
	// policyAgent is kube-router's policy controller (c.kubeRouter).
	policyAgent *benchnode.Proc
	// proxy is kube-proxy (c.proxy == kubeProxy).
	proxy  *benchnode.Proc
	routes *benchnode.PeerRoutes
	cni    *libcni.CNIConfig
	list   *libcni.NetworkConfigList
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
	if e.o.ruleWalk != "" && c.kind != floorKind {
		if err := in.walkRules(pairs); err != nil {
			return nil, fmt.Errorf("rule walk: %w", err)
		}
	}
	out := map[string]*sample{}
	if e.o.noMeasure {
		return out, in.stillRunning()
	}
	for _, p := range pairs {
		if len(e.o.pairs) > 0 && !slices.Contains(e.o.pairs, p.kind) {
			continue
		}
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
	if in.c.policies && in.c.kind == cniboxKind {
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
		if in.c.kubeRouter {
			if err := in.startKubeRouter(n); err != nil {
				return nil, err
			}
		}
		if in.c.proxy == kubeProxy {
			if err := in.startKubeProxy(n); err != nil {
				return nil, err
			}
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
	if in.c.proxy != "" {
		return in.servicePairs(paths, pods)
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
		if in.c.proxy == cniboxProxy {
			args = append(args, cniboxProxyArgs...)
		}
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

// stillRunning is an error if an agent ended during the measurements.
func (in *instance) stillRunning() error {
	for _, n := range in.nodes {
		for _, p := range []*benchnode.Proc{n.agent, n.policyAgent, n.proxy} {
			if p == nil {
				continue
			}
			if ended, err := p.Exited(); ended {
				return fmt.Errorf("%s's %s ended: %v\n%s", n.name, filepath.Base(p.Cmd.Path), err, p.LogTail(2000))
			}
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
		for _, svc := range []string{"dp-b", "dp-c"} {
			e.cs.CoreV1().Services(in.kubeNS).Delete(ctx, svc, metav1.DeleteOptions{})
		}
		e.cs.DiscoveryV1().EndpointSlices(in.kubeNS).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
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
