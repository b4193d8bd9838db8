//go:build kube

package cluster_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cnibox/cnibox/agent/cluster"
	"github.com/cnibox/cnibox/agent/clusteripam"
	"github.com/cnibox/cnibox/agent/egress"
	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/agent/lease"
	"github.com/cnibox/cnibox/agent/lease/kubelease"
	"github.com/cnibox/cnibox/agent/mnp"
	"github.com/cnibox/cnibox/agent/netconf"
	"github.com/cnibox/cnibox/agent/podapi"
	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/test/kube"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// apiCounter is the API server as the agent sees it: a proxy that counts,
// by path, the lists (first pages), the pages and their content types,
// and the watches, those open included.
type apiCounter struct {
	url string

	mu      sync.Mutex
	lists   map[string]int
	pages   map[string]int
	types   map[string]map[string]int
	watches map[string]int
	open    map[string]int
	queries []string // of the watches
}

// newAPICounter starts the proxy to kubeconfig's API server until the
// test ends.
func newAPICounter(t *testing.T, kubeconfig string) *apiCounter {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	must(t, err)
	up, err := url.Parse(rc.Host)
	must(t, err)
	c := &apiCounter{lists: map[string]int{}, pages: map[string]int{}, types: map[string]map[string]int{},
		watches: map[string]int{}, open: map[string]int{}}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(up) },
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			if q := resp.Request.URL.Query(); q.Get("watch") == "" {
				c.mu.Lock()
				p := resp.Request.URL.Path
				if c.types[p] == nil {
					c.types[p] = map[string]int{}
				}
				c.types[p][resp.Header.Get("Content-Type")]++
				c.mu.Unlock()
			}
			return nil
		},
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, q := r.URL.Path, r.URL.Query()
		c.mu.Lock()
		if w := q.Get("watch"); w == "true" || w == "1" {
			c.watches[p]++
			c.open[p]++
			c.queries = append(c.queries, p+"?"+r.URL.RawQuery)
			defer func() { c.mu.Lock(); c.open[p]--; c.mu.Unlock() }()
		} else if r.Method == http.MethodGet {
			c.pages[p]++
			if q.Get("continue") == "" {
				c.lists[p]++
			}
		}
		c.mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	srv.EnableHTTP2 = false
	srv.StartTLS()
	t.Cleanup(srv.Close)
	c.url = srv.URL
	return c
}

// count is f of the counts, under the lock.
func (c *apiCounter) count(f func(c *apiCounter) int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return f(c)
}

// waitFor waits, a minute at most, until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute", what)
		}
	}
}

// logSeen is a log handler that keeps the messages logged.
type logSeen struct {
	mu   sync.Mutex
	msgs map[string]bool
}

func (l *logSeen) Enabled(context.Context, slog.Level) bool { return true }
func (l *logSeen) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.msgs == nil {
		l.msgs = map[string]bool{}
	}
	l.msgs[r.Message] = true
	return nil
}
func (l *logSeen) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logSeen) WithGroup(string) slog.Handler      { return l }

func (l *logSeen) saw(msg string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.msgs[msg]
}

// nopSink takes the model and forgets it.
type nopSink struct{}

func (nopSink) Apply(*policymodel.Model, policymodel.Delta) error { return nil }

// TestKubeOneWatch: every reader of pods and nodes the agent can run at
// once (the NetworkPolicy watcher, the MultiNetworkPolicy watcher, egress
// gateways, the pod API, the cluster IPAM's reclaim and the overlay's
// peers), wired as cnibox-agent wires them (one cluster.Cache, whose
// informer of every pod serves the pod API's reads of its node's), against a
// real API server (test/kube): once each has read them, the API server
// has had one list of the cluster's pods and has one watch of them open,
// and one of the nodes, and no more of namespaces; before the cache each
// reader made its own (before this one, the pod API, the reclaim and the
// overlay still did: three lists and three watches of the pods, three of
// the nodes). The pod API answers a pod of its node from the cache, with
// its UID and annotations, without asking the API server. (client-go asks
// for a streaming list first, which this API server refuses for these
// informers: one watch request more, never open.) Run with -tags kube, as
// root (egress's node is a network namespace of the test's).
func TestKubeOneWatch(t *testing.T) {
	nstest.RequireRoot(t)
	cs, kc := kube.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	doc, err := os.ReadFile("../../deploy/kubernetes/multi-networkpolicy-crd.yaml")
	must(t, err)
	_, doc, _ = bytes.Cut(doc, []byte("\n---\n")) // the comment before it
	kube.CreateCRD(t, cs, doc, "/apis/k8s.cni.cncf.io/v1beta1/multi-networkpolicies")
	doc, err = os.ReadFile("../../deploy/kubernetes/egressgateway-crd.yaml")
	must(t, err)
	kube.CreateCRD(t, cs, doc, "/apis/cnibox.io/v1alpha1/egressgateways")
	doc, err = os.ReadFile("../../deploy/kubernetes/whereabouts-crds.yaml")
	must(t, err)
	for _, d := range bytes.Split(doc, []byte("\n---\n")) {
		for _, r := range []string{"ippools", "overlappingrangeipreservations"} {
			if bytes.Contains(d, []byte("name: "+r+".whereabouts.cni.cncf.io")) {
				kube.CreateCRD(t, cs, d, "/apis/whereabouts.cni.cncf.io/v1alpha1/"+r)
			}
		}
	}
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "t"}}, metav1.CreateOptions{})
	must(t, err)
	_, err = cs.CoreV1().ServiceAccounts("t").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	must(t, err)
	no := false
	for i := range 3 {
		_, err := cs.CoreV1().Pods("t").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i),
			Annotations: map[string]string{"k8s.v1.cni.cncf.io/networks": "net1"}},
			Spec: corev1.PodSpec{NodeName: "n1", AutomountServiceAccountToken: &no, Containers: []corev1.Container{{Name: "c", Image: "none"}}}},
			metav1.CreateOptions{})
		must(t, err)
	}
	an, err := kubelease.NewAnnotations(kubelease.DefaultAnnotationPrefix)
	must(t, err)
	_, err = cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2",
		Annotations: map[string]string{an.SubnetKubeManaged: "true", an.BackendType: "host-gw", an.BackendData: "null", an.PublicIP: "192.0.2.2"}},
		Spec: corev1.NodeSpec{PodCIDR: "10.244.2.0/24"}}, metav1.CreateOptions{})
	must(t, err)

	api := newAPICounter(t, kc)
	c := kubeapi.Cluster{Kubeconfig: kc, APIURL: api.url, NodeName: "n1"}
	shared := cluster.NewWith(cluster.Config{Cluster: c, NodeAnnotations: an.Peers(), ClusterPods: true})
	shared.Start(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	run := func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() }

	policySynced := make(chan struct{})
	run(func() {
		err := policy.Watch(ctx, policy.WatchConfig{Cluster: c, Cache: shared, Syncer: nopSink{}, Synced: func() { close(policySynced) }})
		if err != nil {
			t.Errorf("policy.Watch: %v", err)
		}
	})
	mnpLog := &logSeen{}
	w, err := mnp.New(mnp.Config{Cluster: c, Cache: shared, Log: slog.New(mnpLog), DataDir: t.TempDir()})
	must(t, err)
	run(func() {
		if err := w.Run(ctx); err != nil {
			t.Errorf("mnp: %v", err)
		}
	})
	h, err := netops.Open(nstest.NewNS(t, "onewatch"))
	must(t, err)
	defer h.Close()
	egressLog := &logSeen{}
	run(func() {
		err := egress.Run(ctx, egress.Config{Cluster: c, Cache: shared, Log: slog.New(egressLog), Namespace: egress.LeaseNamespace,
			Host: h, DataDir: t.TempDir(), CRDPoll: time.Second, Recheck: time.Hour,
			Overlay: func() (string, []netip.Prefix, bool) {
				return "eth0", []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}, true
			}})
		if err != nil {
			t.Errorf("egress.Run: %v", err)
		}
	})
	pods, err := podapi.NewKube(podapi.Config{Cluster: c, Cache: shared})
	must(t, err)
	run(func() { pods.Run(ctx) })
	rc, err := c.Config("test")
	must(t, err)
	ipam, err := clusteripam.NewKube(rc, "kube-system", nil)
	must(t, err)
	run(func() { ipam.Run(ctx) })
	reclaim := &clusteripam.Reclaimer{Kube: ipam, Alloc: &clusteripam.Allocator{B: ipam, Node: "n1"}, Identity: "n1",
		Interval: time.Second, Pods: shared, Log: slog.Default()}
	run(func() { reclaim.Run(ctx) })
	overlay, err := kubelease.New(kubelease.Config{Cluster: c, Cache: shared,
		NetConf: &netconf.Config{EnableIPv4: true, Network: netip.MustParsePrefix("10.244.0.0/16")}})
	must(t, err)
	peers := make(chan lease.Update, 16)
	run(func() {
		if err := overlay.Watch(ctx, func(u lease.Update) { peers <- u }); err != nil && ctx.Err() == nil {
			t.Errorf("the overlay's watch: %v", err)
		}
	})

	// Each has read the pods and the nodes: the policy watcher's first
	// sync is applied, mnp's informers have listed, egress's Leases (its
	// last informer, after pods, namespaces and nodes) are watched, the
	// pod API's reader has synced, the reclaim has scanned (its list of
	// the pools, after the informer's, once it read the pods) and the
	// overlay has its snapshot of the peers.
	leases := "/apis/coordination.k8s.io/v1/namespaces/" + egress.LeaseNamespace + "/leases"
	const ippools = "/apis/whereabouts.cni.cncf.io/v1alpha1/namespaces/kube-system/ippools"
	waitFor(t, "the six readers up", func() bool {
		select {
		case <-policySynced:
		default:
			return false
		}
		return mnpLog.saw("multi-network policy: watching") && egressLog.saw("egress gateways: serving") &&
			api.count(func(c *apiCounter) int { return c.open[leases] }) > 0 && pods.HasSynced() &&
			api.count(func(c *apiCounter) int { return c.lists[ippools] }) >= 2
	})
	var snap lease.Update
	select {
	case snap = <-peers:
	case <-time.After(time.Minute):
		t.Fatal("the overlay's watch: no snapshot within a minute")
	}
	if len(snap.Leases) != 1 || snap.Leases[0].Subnet != netip.MustParsePrefix("10.244.2.0/24") || snap.Leases[0].Attrs.PublicIP != netip.MustParseAddr("192.0.2.2") {
		t.Errorf("the overlay's snapshot of the peers: %+v, want n2's 10.244.2.0/24 at 192.0.2.2", snap)
	}
	p, err := pods.Pod(ctx, "t", "p1", "")
	if err != nil || p.UID == "" || p.Annotations["k8s.v1.cni.cncf.io/networks"] != "net1" || p.NodeName != "n1" {
		t.Errorf("the pod API's t/p1: %+v, %v; want its UID and annotations", p, err)
	}
	const podsPath, nodesPath = "/api/v1/pods", "/api/v1/nodes"
	waitFor(t, "a watch of the pods and of the nodes", func() bool {
		return api.count(func(c *apiCounter) int { return min(c.open[podsPath], c.open[nodesPath]) }) > 0
	})
	api.mu.Lock()
	defer api.mu.Unlock()
	if n := api.pages["/api/v1/namespaces/t/pods/p1"]; n != 0 {
		t.Errorf("the pod API asked the API server for t/p1 %d times, want none (the cache has it)", n)
	}
	for _, p := range []string{podsPath, nodesPath} {
		if api.lists[p] != 1 || api.open[p] != 1 {
			t.Errorf("%s: the API server had %d lists and has %d watches open (%d opened, of which the streaming lists it refused), want one of each",
				p, api.lists[p], api.open[p], api.watches[p])
		}
	}
	if p := "/api/v1/namespaces"; api.lists[p] > 1 || api.open[p] > 1 {
		t.Errorf("%s: %d lists, %d watches open, want one of each at most", p, api.lists[p], api.open[p])
	}
	t.Logf("lists %v, watches opened %v, open %v; the watches: %q", api.lists, api.watches, api.open, api.queries)
}

// TestKubeListPaged: the cache's informers list page by page, in
// protobuf, and keep slim objects only: 1,100 pods on a real API server
// come in three list requests or more, every answer protobuf, and the
// store holds 1,100 Pods. A reader that comes once the informer has
// synced is handed all of them.
func TestKubeListPaged(t *testing.T) {
	cs, kc := kube.Client(t)
	ctx := context.Background()
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "p"}}, metav1.CreateOptions{})
	must(t, err)
	_, err = cs.CoreV1().ServiceAccounts("p").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	must(t, err)
	no := false
	const n = 1100
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Labels: map[string]string{"app": "x"}},
				Spec: corev1.PodSpec{AutomountServiceAccountToken: &no, Containers: []corev1.Container{{Name: "c", Image: "none"}}}}
			if _, err := cs.CoreV1().Pods("p").Create(ctx, p, metav1.CreateOptions{}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	must(t, <-errs) // nil when none
	api := newAPICounter(t, kc)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c := cluster.New(kubeapi.Cluster{Kubeconfig: kc, APIURL: api.url}, nil)
	c.Start(cctx)
	first, err := c.Handle(cluster.Pods, cache.ResourceEventHandlerFuncs{})
	must(t, err)
	defer first.Stop()
	if !cache.WaitForCacheSync(cctx.Done(), first.HasSynced) {
		t.Fatal("the informer did not sync")
	}
	items := c.List(cluster.Pods)
	if len(items) != n {
		t.Errorf("the store holds %d pods, want %d", len(items), n)
	}
	for _, it := range items {
		if _, ok := it.(*cluster.Pod); !ok {
			t.Fatalf("the store holds a %T, want *cluster.Pod", it)
		}
	}
	var mu sync.Mutex
	late := 0
	second, err := c.Handle(cluster.Pods, cache.ResourceEventHandlerFuncs{AddFunc: func(any) { mu.Lock(); late++; mu.Unlock() }})
	must(t, err)
	if !cache.WaitForCacheSync(cctx.Done(), second.HasSynced) {
		t.Fatal("the second reader did not sync")
	}
	second.Stop()
	mu.Lock()
	if late != n {
		t.Errorf("a reader that came later was handed %d pods, want %d", late, n)
	}
	mu.Unlock()
	api.mu.Lock()
	defer api.mu.Unlock()
	const pods = "/api/v1/pods"
	if api.lists[pods] != 1 || api.pages[pods] < (n+kubeapi.ListPageSize-1)/kubeapi.ListPageSize {
		t.Errorf("%d lists in %d requests for %d pods: want one, paged by %d", api.lists[pods], api.pages[pods], n, kubeapi.ListPageSize)
	}
	if api.types[pods][runtime.ContentTypeProtobuf] != api.pages[pods] {
		t.Errorf("answers to %d list requests by content type: %v, want all %s", api.pages[pods], api.types[pods], runtime.ContentTypeProtobuf)
	}
}

// TestKubeNodePods: a pod-API-only agent's cache (no reader of every pod
// enabled: Config.ClusterPods false) lists and watches its node's pods
// alone (field selector spec.nodeName): a pod of another node, there
// before or created after, is never in it, one of its node created after
// comes; the cluster IPAM's reclaim reading every pod meanwhile gets an
// informer of its own, gone when it stops, and the node's stays. With
// ClusterPods the node's readers share the informer of every pod: one list
// and one watch of the pods. (Before, the node's pods were read from the
// informer of every pod whatever ran.)
func TestKubeNodePods(t *testing.T) {
	cs, kc := kube.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "q"}}, metav1.CreateOptions{})
	must(t, err)
	_, err = cs.CoreV1().ServiceAccounts("q").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	must(t, err)
	no := false
	create := func(name, node string) {
		t.Helper()
		_, err := cs.CoreV1().Pods("q").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeName: node, AutomountServiceAccountToken: &no, Containers: []corev1.Container{{Name: "c", Image: "none"}}}},
			metav1.CreateOptions{})
		must(t, err)
	}
	create("a", "n1")
	create("b", "n2")
	keys := func(c *cluster.Cache, kind cluster.Kind) []string {
		var out []string
		for _, o := range c.List(kind) {
			out = append(out, o.(*cluster.Pod).Key())
		}
		slices.Sort(out)
		return out
	}
	synced := func(h *cluster.Handler) {
		t.Helper()
		if !cache.WaitForCacheSync(ctx.Done(), h.HasSynced) {
			t.Fatal("the informer did not sync")
		}
	}

	api := newAPICounter(t, kc)
	c := cluster.NewWith(cluster.Config{Cluster: kubeapi.Cluster{Kubeconfig: kc, APIURL: api.url, NodeName: "n1"}})
	c.Start(ctx)
	node, err := c.Handle(cluster.NodePods, cache.ResourceEventHandlerFuncs{})
	must(t, err)
	defer node.Stop()
	synced(node)
	if got := keys(c, cluster.NodePods); !slices.Equal(got, []string{"q/a"}) {
		t.Errorf("the node's pods: %v, want [q/a]", got)
	}
	if got := keys(c, cluster.Pods); got != nil {
		t.Errorf("every pod: %v, want none (no reader)", got)
	}
	create("c", "n2")
	create("d", "n1")
	waitFor(t, "q/d in the node's pods", func() bool { _, ok := c.Get(cluster.NodePods, "q/d"); return ok })
	// q/c was created before q/d: had the watch carried it, it would be
	// in the store by now.
	if got := keys(c, cluster.NodePods); !slices.Equal(got, []string{"q/a", "q/d"}) {
		t.Errorf("the node's pods after two more: %v, want [q/a q/d]", got)
	}
	api.mu.Lock()
	for _, q := range api.queries {
		if !strings.Contains(q, "fieldSelector=spec.nodeName%3Dn1") {
			t.Errorf("a watch without the node's field selector: %s", q)
		}
	}
	if len(api.queries) == 0 {
		t.Error("no watch of the node's pods")
	}
	api.mu.Unlock()

	reclaim, err := c.Handle(cluster.Pods, cache.ResourceEventHandlerFuncs{})
	must(t, err)
	synced(reclaim)
	if got := keys(c, cluster.Pods); !slices.Equal(got, []string{"q/a", "q/b", "q/c", "q/d"}) {
		t.Errorf("every pod, for the reclaim: %v, want the four", got)
	}
	reclaim.Stop()
	if got := keys(c, cluster.Pods); got != nil {
		t.Errorf("every pod once the reclaim stopped: %v, want none", got)
	}
	if got := keys(c, cluster.NodePods); !slices.Equal(got, []string{"q/a", "q/d"}) {
		t.Errorf("the node's pods once the reclaim stopped: %v, want [q/a q/d]", got)
	}

	// With a reader of every pod: one informer serves both.
	api2 := newAPICounter(t, kc)
	shared := cluster.NewWith(cluster.Config{Cluster: kubeapi.Cluster{Kubeconfig: kc, APIURL: api2.url, NodeName: "n1"}, ClusterPods: true})
	shared.Start(ctx)
	all, err := shared.Handle(cluster.Pods, cache.ResourceEventHandlerFuncs{})
	must(t, err)
	defer all.Stop()
	mine, err := shared.Handle(cluster.NodePods, cache.ResourceEventHandlerFuncs{})
	must(t, err)
	defer mine.Stop()
	synced(all)
	synced(mine)
	if _, ok := shared.Get(cluster.NodePods, "q/d"); !ok {
		t.Error("q/d not in the node's pods of the shared informer")
	}
	const podsPath = "/api/v1/pods"
	waitFor(t, "a watch of the pods", func() bool { return api2.count(func(c *apiCounter) int { return c.open[podsPath] }) > 0 })
	api2.mu.Lock()
	defer api2.mu.Unlock()
	if api2.lists[podsPath] != 1 || api2.open[podsPath] != 1 {
		t.Errorf("with ClusterPods: %d lists and %d watches open of the pods, want one of each", api2.lists[podsPath], api2.open[podsPath])
	}
}
