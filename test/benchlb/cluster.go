package main

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/test/internal/benchnode"
)

// The private namespace holds the underlay bridge (10.79.0.254/16) and the
// API server, bound to every address so that the nodes' namespaces reach
// it over the bridge. Node i (1, 2) is 10.79.1.i with pod CIDR
// 10.244.i.0/24; its agent serves /metrics on 10.79.1.i:9666.
const (
	underlayBridge = "lbbr0"
	benchNS        = "lbbench"
	clusterCIDR    = "10.244.0.0/16"
	poolCIDR       = "198.18.0.0/16" // RFC 2544's benchmarking range: 65,534 addresses
	metricsPort    = 9666
	maxServices    = 20000
	maxSamples     = 10000
)

var (
	apiPort    = cmp.Or(os.Getenv("KCP_API_PORT"), "16443")
	underlayGW = netip.MustParsePrefix("10.79.0.254/16")
)

// nodeAddr is node i's underlay address.
func nodeAddr(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 79, 1, byte(i)}), 16)
}

func nodeName(i int) string { return fmt.Sprintf("lbbench-%d", i) }

// cluster is the control plane, the bench's client, the nodes and their
// agents.
type cluster struct {
	o   *options
	dir string
	h   *netops.Handle
	cs  kubernetes.Interface
	kc  string // the kubeconfig the nodes use
	ctx context.Context

	closeOnce sync.Once
	mu        sync.Mutex
	nodes     []*benchnode.NS
	agents    map[string]*benchnode.Proc // by node name
}

func newCluster(o *options) (*cluster, error) {
	dir, err := os.MkdirTemp("", "cnibox-bench-lb-")
	if err != nil {
		return nil, err
	}
	c := &cluster{o: o, dir: dir, ctx: context.Background(), agents: map[string]*benchnode.Proc{}}
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
	t0 := time.Now()
	cmd := exec.Command("bash", o.kcp, "start", kcp, clusterCIDR, "24")
	cmd.Env = append(os.Environ(), "KCP_BIND=0.0.0.0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return c, fmt.Errorf("start the control plane: %v\n%s", err, out)
	}
	o.logf("control plane up in %.1f s", time.Since(t0).Seconds())
	c.kc = filepath.Join(dir, "kubeconfig-node")
	if c.cs, err = benchnode.APIClients(kcp, c.kc, apiPort, underlayGW.Addr(), 10000); err != nil {
		return c, err
	}
	return c, c.populate()
}

// close stops the agents, removes the nodes' namespaces, stops the control
// plane and removes the bridge and the directory; once.
func (c *cluster) close() {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		for _, p := range c.agents {
			p.Stop()
		}
		for _, n := range c.nodes {
			n.Close()
		}
		c.mu.Unlock()
		exec.Command("bash", c.o.kcp, "stop", filepath.Join(c.dir, "kcp")).Run()
		if c.h != nil {
			c.h.DeleteLink(underlayBridge)
			c.h.Close()
		}
		os.RemoveAll(c.dir)
	})
}

// populate creates the CRD, the pool, the namespace and two nodes (Ready,
// with their address and pod CIDR, as a kubelet would leave them) with
// their namespaces.
func (c *cluster) populate() error {
	doc, err := os.ReadFile(c.o.crd)
	if err != nil {
		return err
	}
	body, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return fmt.Errorf("%s: %w", c.o.crd, err)
	}
	rc := c.cs.CoreV1().RESTClient()
	if err := rc.Post().AbsPath("/apis/apiextensions.k8s.io/v1/customresourcedefinitions").Body(body).
		SetHeader("Content-Type", "application/json").Do(c.ctx).Error(); err != nil {
		return fmt.Errorf("create the CRD: %w", err)
	}
	pool := []byte(`{"apiVersion":"cnibox.io/v1alpha1","kind":"LoadBalancerIPPool","metadata":{"name":"bench"},"spec":{"blocks":[{"cidr":"` + poolCIDR + `"}]}}`)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		err := rc.Post().AbsPath("/apis/cnibox.io/v1alpha1/loadbalancerippools").Body(pool).SetHeader("Content-Type", "application/json").Do(c.ctx).Error()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("create the pool (the CRD not served?): %w", err)
		}
	}
	if _, err := c.cs.CoreV1().Namespaces().Create(c.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNS}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	nodes := 1
	if c.o.kills > 0 {
		nodes = 2
	}
	for i := 1; i <= nodes; i++ {
		cidr := fmt.Sprintf("10.244.%d.0/24", i)
		n, err := c.cs.CoreV1().Nodes().Create(c.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName(i)},
			Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}}}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("node: %w", err)
		}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nodeAddr(i).Addr().String()}, {Type: corev1.NodeHostName, Address: n.Name}}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		if _, err := c.cs.CoreV1().Nodes().UpdateStatus(c.ctx, n, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("node status: %w", err)
		}
		ns, err := benchnode.NewNS(fmt.Sprintf("lbb%d-%d", i, os.Getpid()), benchnode.Wire{Host: c.h, HostVeth: fmt.Sprintf("lbbv%d", i), Bridge: underlayBridge, Addr: nodeAddr(i)})
		if ns != nil {
			c.mu.Lock()
			c.nodes = append(c.nodes, ns)
			c.mu.Unlock()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// startAgent runs node i's agent (its log appended to across restarts)
// and waits until it takes part in the election.
func (c *cluster) startAgent(i int) error {
	dir := filepath.Join(cmp.Or(c.o.logs, c.dir), nodeName(i))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	conf := filepath.Join(dir, "net-conf.json")
	if err := os.WriteFile(conf, []byte(`{"Network": "`+clusterCIDR+`", "SubnetLen": 24, "Backend": {"Type": "vxlan"}}`), 0o644); err != nil {
		return err
	}
	args := append([]string{"--kube-subnet-mgr", "--kubeconfig-file", c.kc, "--iface", "eth0", "--net-config-path", conf,
		"--subnet-file", filepath.Join(dir, "subnet.env"), "--data-dir", filepath.Join(dir, "data"),
		"--lb-ipam", "--health-addr", netip.AddrPortFrom(nodeAddr(i).Addr(), metricsPort).String()}, strings.Fields(c.o.agentArgs)...)
	log := filepath.Join(dir, "agent.log")
	before := 0
	if b, err := os.ReadFile(log); err == nil {
		before = strings.Count(string(b), electionLine)
	}
	p, err := benchnode.Start(benchnode.StartOpts{Bin: c.o.agent, Args: args, Env: []string{"NODE_NAME=" + nodeName(i)},
		Log: log, Append: true, NS: c.nodes[i-1].Path})
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.agents[nodeName(i)] = p
	c.mu.Unlock()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if err := p.ExitError("the agent of "+nodeName(i), 3000); err != nil {
			return err
		}
		if b, _ := os.ReadFile(log); strings.Count(string(b), electionLine) > before {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the agent of %s does not take part in the election after 2 minutes:\n%s", nodeName(i), p.LogTail(3000))
		}
	}
}

// electionLine is what agent/lbipam logs once it takes part.
const electionLine = "LoadBalancer IPAM: taking part in the election"

// kill SIGKILLs the agent of node name and waits for its end.
func (c *cluster) kill(name string) error {
	c.mu.Lock()
	p := c.agents[name]
	delete(c.agents, name)
	c.mu.Unlock()
	if p == nil {
		return fmt.Errorf("no agent runs on %s", name)
	}
	if err := p.Cmd.Process.Kill(); err != nil {
		return err
	}
	p.Cmd.Wait()
	return nil
}

// agent is node name's agent (nil: none runs).
func (c *cluster) agent(name string) *benchnode.Proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.agents[name]
}

// leader is the holder of the Lease cnibox-lb-ipam ("" none yet).
func (c *cluster) leader() string {
	l, err := c.cs.CoordinationV1().Leases("kube-system").Get(c.ctx, "cnibox-lb-ipam", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// waitLeader waits until one of the running agents holds the Lease.
func (c *cluster) waitLeader() (string, error) {
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if l := c.leader(); l != "" && c.agent(l) != nil {
			return l, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no running agent holds the Lease cnibox-lb-ipam after a minute (holder %q)", c.leader())
		}
	}
}

// writes is the agent of node i's count of status writes by result (its
// /metrics: cnibox_agent_lb_ipam_status_writes_total).
func writes(i int) (map[string]float64, error) {
	resp, err := http.Get("http://" + netip.AddrPortFrom(nodeAddr(i).Addr(), metricsPort).String() + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	const name = `cnibox_agent_lb_ipam_status_writes_total{result="`
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		q := strings.IndexByte(rest, '"')
		f := strings.Fields(rest)
		if q < 0 || len(f) < 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			out[rest[:q]] = v
		}
	}
	return out, sc.Err()
}

// createService creates Service name of type LoadBalancer, retried for up
// to 3 minutes whatever the error (a loaded etcd times out now and then);
// one that exists already (a create whose answer was lost) is kept.
func (c *cluster) createService(name string) error {
	no := false
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: benchNS},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: &no,
			Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}}
	deadline := time.Now().Add(3 * time.Minute)
	for wait := time.Second; ; wait = min(2*wait, 10*time.Second) {
		_, err := c.cs.CoreV1().Services(benchNS).Create(c.ctx, s, metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		if time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("create Service %s: %w", name, err)
		}
		time.Sleep(wait)
	}
}
