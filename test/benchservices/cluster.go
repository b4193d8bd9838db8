package main

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/test/internal/benchnode"
	"github.com/cnibox/cnibox/test/internal/policyload"
)

// The private namespace holds the underlay bridge (10.78.0.254/16) and the
// API server, bound to every address so that the node namespace reaches
// it over the bridge. The node (one at a time: each proxy gets a fresh
// one) is 10.78.1.1 with pod CIDR 10.255.255.0/24.
const (
	underlayBridge = "sbbr0"
	nodeName       = "svcbench-node"
)

var (
	// apiPort is control-plane.sh's (16443 unless $KCP_API_PORT moves it).
	apiPort    = cmp.Or(os.Getenv("KCP_API_PORT"), "16443")
	underlayGW = netip.MustParsePrefix("10.78.0.254/16")
	nodeAddr   = netip.MustParsePrefix("10.78.1.1/16")
	nodePodNet = netip.MustParsePrefix("10.255.255.0/24")
)

// cluster is the control plane and the API objects every proxy shares.
type cluster struct {
	o   *options
	dir string
	h   *netops.Handle
	cs  kubernetes.Interface
	// creators create the bench Services and their slices (creators.go).
	creators []kubernetes.Interface
	kc       string // the kubeconfig the node namespace uses
	ctx      context.Context

	closeOnce sync.Once
	mu        sync.Mutex
	node      *node // the node namespace of the proxy running now

	services int // bench Services created so far (s-0 ... s-(services-1))
	samples  int // sample Services created so far (names are never reused)
}

func newCluster(o *options) (*cluster, error) {
	dir, err := os.MkdirTemp("", "cnibox-bench-services-")
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
	t0 := time.Now()
	cmd := exec.Command("bash", o.kcp, "start", kcp, clusterCIDR, "24")
	cmd.Env = append(os.Environ(), "KCP_BIND=0.0.0.0", "KCP_SERVICE_CIDR="+serviceCIDR)
	if out, err := cmd.CombinedOutput(); err != nil {
		return c, fmt.Errorf("start the control plane: %v\n%s", err, out)
	}
	o.logf("control plane up in %.1f s", time.Since(t0).Seconds())
	c.kc = filepath.Join(dir, "kubeconfig-node")
	if c.cs, err = benchnode.APIClients(kcp, c.kc, apiPort, underlayGW.Addr(), 10000); err != nil {
		return c, err
	}
	if c.creators, err = creators(kcp, o.clients); err != nil {
		return c, err
	}
	return c, c.populate()
}

// close stops the running proxy and removes its namespace, stops the
// control plane and removes the bridge and the directory; once.
func (c *cluster) close() {
	c.closeOnce.Do(c.closeNow)
}

func (c *cluster) closeNow() {
	c.mu.Lock()
	nd := c.node
	c.mu.Unlock()
	nd.close()
	exec.Command("bash", c.o.kcp, "stop", filepath.Join(c.dir, "kcp")).Run()
	if c.h != nil {
		c.h.DeleteLink(underlayBridge)
		c.h.Close()
	}
	os.RemoveAll(c.dir)
}

// populate creates the namespace and the node (Ready, with its address
// and pod CIDR, as a kubelet would leave it).
func (c *cluster) populate() error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNS}}
	if _, err := c.cs.CoreV1().Namespaces().Create(c.ctx, ns, metav1.CreateOptions{}); err != nil {
		return err
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName},
		Spec:       corev1.NodeSpec{PodCIDR: nodePodNet.String(), PodCIDRs: []string{nodePodNet.String()}},
	}
	n, err := c.cs.CoreV1().Nodes().Create(c.ctx, n, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nodeAddr.Addr().String()}, {Type: corev1.NodeHostName, Address: nodeName}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if _, err := c.cs.CoreV1().Nodes().UpdateStatus(c.ctx, n, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("node status: %w", err)
	}
	return nil
}

// grow creates bench Services (and their EndpointSlices) until there are
// n, -workers at a time, and returns how long it took.
func (c *cluster) grow(n int) (time.Duration, error) {
	if n > maxServices {
		return 0, fmt.Errorf("%d Services: at most %d", n, maxServices)
	}
	t0 := time.Now()
	from := c.services
	var done atomic.Int64
	stop := make(chan struct{})
	defer close(stop)
	go func() { // progress, every 30 s
		for {
			select {
			case <-stop:
				return
			case <-time.After(30 * time.Second):
				c.o.logf("created %d of %d Services", from+int(done.Load()), n)
			}
		}
	}()
	err := policyload.Parallel(c.o.workers, n-from, func(j int) error {
		i := from + j
		err := c.create(serviceName(i), benchIP(i), i, nil)
		done.Add(1)
		return err
	})
	if err != nil {
		return 0, err
	}
	c.services = n
	return time.Since(t0), nil
}

// create creates the EndpointSlice, then the Service (a proxy sees the
// Service with its endpoints, not first without any). One that exists
// already (a retried create) is kept.
func (c *cluster) create(name string, ip netip.Addr, o int, labels map[string]string) error {
	cs := c.creator(o)
	if err := c.createSlice(cs, name, o, labels); err != nil {
		return err
	}
	return c.createService(cs, name, ip, labels)
}

func (c *cluster) createSlice(cs kubernetes.Interface, name string, o int, labels map[string]string) error {
	err := retry(func() error {
		_, err := cs.DiscoveryV1().EndpointSlices(benchNS).Create(c.ctx, slice(name, o, labels), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("create EndpointSlice %s: %w", name, err)
	}
	return nil
}

func (c *cluster) createService(cs kubernetes.Interface, name string, ip netip.Addr, labels map[string]string) error {
	err := retry(func() error {
		_, err := cs.CoreV1().Services(benchNS).Create(c.ctx, service(name, ip, labels), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("create Service %s: %w", name, err)
	}
	return nil
}

// retry runs create until it succeeds or finds the object there (a
// create whose answer was lost may have been done), for up to 10
// minutes, whatever the error: on a loaded machine etcd times out
// now and then ("etcdserver: request timed out"), and the API server
// answers a ClusterIP it could not allocate for that reason as an
// invalid Service. An object the API really refuses fails for 3
// minutes.
func retry(create func() error) error {
	deadline := time.Now().Add(10 * time.Minute)
	for wait := time.Second; ; wait = min(2*wait, 10*time.Second) {
		err := create()
		if err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		if time.Now().Add(wait).After(deadline) {
			return err
		}
		time.Sleep(wait)
	}
}

// nextSample is the next sample's index and its ClusterIP.
func (c *cluster) nextSample() (int, netip.Addr, error) {
	k := c.samples
	if k >= maxSamples {
		return 0, netip.Addr{}, fmt.Errorf("more than %d samples", maxSamples)
	}
	c.samples++
	return k, sampleIP(k), nil
}

var sampleLabels = map[string]string{sampleLabel: "1"}

// createSampleSlice and createSampleService create sample k's objects
// (labelled, for cleanSamples).
func (c *cluster) createSampleSlice(k int) error {
	return c.createSlice(c.cs, sampleName(k), maxServices+k, sampleLabels)
}

func (c *cluster) createSampleService(k int) error {
	return c.createService(c.cs, sampleName(k), sampleIP(k), sampleLabels)
}

// cleanSamples deletes the sample Services and their EndpointSlices.
func (c *cluster) cleanSamples() error {
	sel := metav1.ListOptions{LabelSelector: sampleLabel}
	svcs, err := c.cs.CoreV1().Services(benchNS).List(c.ctx, sel)
	if err != nil {
		return err
	}
	// Services have no delete-collection.
	err = policyload.Parallel(c.o.workers, len(svcs.Items), func(j int) error {
		err := c.cs.CoreV1().Services(benchNS).Delete(c.ctx, svcs.Items[j].Name, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	return c.cs.DiscoveryV1().EndpointSlices(benchNS).DeleteCollection(c.ctx, metav1.DeleteOptions{}, sel)
}
