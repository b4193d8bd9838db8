//go:build !nokube

package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/internal/kubecore"
)

// Kind is a kind of object the cache holds.
type Kind int

// The kinds of the cache. NodePods are the pods of the cache's node
// (Cache.Node), which the pod API reads: an informer of its own, which
// lists and watches them alone (field selector spec.nodeName), unless
// Config.ClusterPods says that the informer of every pod runs anyway, which
// then serves them (see Config.ClusterPods).
const (
	Pods Kind = iota
	Namespaces
	Nodes
	// Services and EndpointSlices are the Services proxy's
	// (agent/services), the domainNames resolvers' (agent/policy) and
	// the LoadBalancer IPAM's (agent/lbipam).
	Services
	EndpointSlices
	// ServiceCIDRs are the cluster's Service ranges
	// (networking.k8s.io/v1), the Services proxy's check of the range.
	ServiceCIDRs
	NodePods
	numKinds
)

// kinds are each kind's API: its group/version and the path that serves
// it, its resource and API types (decoded in protobuf, then slimmed). A
// kind more (the Services proxy's Services and EndpointSlices) is an entry
// here, its slim form (objects.go, services.go) and its case in slim.
var kinds = [numKinds]struct {
	gv       schema.GroupVersion
	apiPath  string
	resource string
	obj      runtime.Object
	page     func() runtime.Object
}{
	Pods:       {corev1.SchemeGroupVersion, "/api", "pods", &corev1.Pod{}, func() runtime.Object { return &corev1.PodList{} }},
	Namespaces: {corev1.SchemeGroupVersion, "/api", "namespaces", &corev1.Namespace{}, func() runtime.Object { return &corev1.NamespaceList{} }},
	Nodes:      {corev1.SchemeGroupVersion, "/api", "nodes", &corev1.Node{}, func() runtime.Object { return &corev1.NodeList{} }},
	Services:   {corev1.SchemeGroupVersion, "/api", "services", &corev1.Service{}, func() runtime.Object { return &corev1.ServiceList{} }},
	EndpointSlices: {discoveryv1.SchemeGroupVersion, "/apis", "endpointslices", &discoveryv1.EndpointSlice{},
		func() runtime.Object { return &discoveryv1.EndpointSliceList{} }},
	ServiceCIDRs: {networkingv1.SchemeGroupVersion, "/apis", "servicecidrs", &networkingv1.ServiceCIDR{},
		func() runtime.Object { return &networkingv1.ServiceCIDRList{} }},
	NodePods: {corev1.SchemeGroupVersion, "/api", "pods", &corev1.Pod{}, func() runtime.Object { return &corev1.PodList{} }},
}

func (k Kind) String() string {
	if k == NodePods {
		return "pods of the node"
	}
	if k >= 0 && k < numKinds {
		return kinds[k].resource
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Cache is the agent's informer cache. An informer of a kind is made with
// the first Handle of that kind (a kind nobody reads is never listed) and
// runs from then, or from Start, until its last reader stops (a reader
// that comes later lists again: the cluster IPAM's reclaim reads the pods
// only while its agent holds the reclaim's Lease) or Start's context
// ends; each reader registers its own handler on it, which is handed
// every object the informer holds at once, then every change.
type Cache struct {
	cluster kubeapi.Cluster
	log     *slog.Logger
	keep    keep
	// clusterPods: NodePods are read from the informer of every pod
	// (Config.ClusterPods).
	clusterPods bool

	mu        sync.Mutex
	ctx       context.Context // Start's; nil before
	rc        *rest.Config    // made with the first informer, in protobuf
	informers [numKinds]cache.SharedIndexInformer
	readers   [numKinds]int                // the handlers of each informer
	stop      [numKinds]context.CancelFunc // ends each running informer
}

// Config configures a cache.
type Config struct {
	// Cluster is the API server's; its NodeName (else $NODE_NAME, else
	// the hostname) is the node whose pods keep their UID and
	// annotations (Pod.Local).
	kubeapi.Cluster
	// Log (nil: the default) is told of what the cache cannot read of an
	// object.
	Log *slog.Logger
	// NodeAnnotations are the annotations kept of each Node
	// (Node.Annotations): the overlay's lease (agent/lease/kubelease).
	NodeAnnotations []string
	// ClusterPods says that a reader of every pod of the cluster runs for
	// the cache's life (the NetworkPolicy watcher, MultiNetworkPolicy,
	// egress gateways): the readers of the node's pods (NodePods, the pod
	// API) share that informer, one list and one watch of the pods in
	// all. Without it (a pod-API-only agent, cnibox-multus.yaml) NodePods
	// is an informer of the node's pods alone, so that the agent neither
	// holds nor watches the cluster's; the cluster IPAM's reclaim, which
	// reads every pod while its agent holds the reclaim's Lease, has an
	// informer of Pods for that while.
	ClusterPods bool
	// LoadBalancer, if set, is what the LoadBalancer IPAM (agent/lbipam)
	// keeps of each Service (Service.LoadBalancer; nil of one it has no
	// part in), made once at the informer's transform, so that the
	// elected IPAM reads the Services from the one informer the Services
	// proxy and the NetworkPolicy watcher read.
	LoadBalancer func(*corev1.Service) any
}

// New returns a cache of c's cluster, as NewWith.
func New(c kubeapi.Cluster, log *slog.Logger) *Cache {
	return NewWith(Config{Cluster: c, Log: log})
}

// NewWith returns a cache as cfg says.
func NewWith(cfg Config) *Cache {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	node, err := kubecore.NodeName(cfg.NodeName, "cluster cache")
	if err != nil {
		cfg.Log.Warn("cluster cache: no node name: it keeps no pod's UID and annotations (the pod API asks the API server)", "err", err)
	}
	return &Cache{cluster: cfg.Cluster, log: cfg.Log, keep: keep{node: node, nodeAnnotations: cfg.NodeAnnotations, loadBalancer: cfg.LoadBalancer}, clusterPods: cfg.ClusterPods}
}

// resolve is the kind whose informer serves kind's readers: NodePods are
// Pods' when the informer of every pod runs anyway (Config.ClusterPods) or
// when the cache has no node to select by.
func (c *Cache) resolve(kind Kind) Kind {
	if kind == NodePods && (c.clusterPods || c.keep.node == "") {
		return Pods
	}
	return kind
}

// Node is the node whose pods the cache keeps whole enough for the pod
// API (Pod.Local); "" none.
func (c *Cache) Node() string { return c.keep.node }

// Start runs the informers made so far, and those made later, until ctx
// ends. A cache runs once: a second Start does nothing.
func (c *Cache) Start(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx != nil {
		return
	}
	c.ctx = ctx
	for kind, inf := range c.informers {
		if inf != nil {
			c.run(Kind(kind))
		}
	}
}

// run runs kind's informer until Start's context ends or its last reader
// stops (c.mu held).
func (c *Cache) run(kind Kind) {
	ctx, cancel := context.WithCancel(c.ctx)
	c.stop[kind] = cancel
	go c.informers[kind].RunWithContext(ctx)
}

// informer returns kind's informer, made (and run, once started) the first
// time (c.mu held).
func (c *Cache) informer(kind Kind) (cache.SharedIndexInformer, error) {
	if inf := c.informers[kind]; inf != nil {
		return inf, nil
	}
	const what = "cluster cache"
	if c.rc == nil {
		rc, err := c.cluster.Config(what)
		if err != nil {
			return nil, err
		}
		c.rc = kubeapi.Protobuf(rc)
	}
	k := kinds[kind]
	client, err := kubecore.GroupClient(c.rc, k.gv, k.apiPath, k.obj, k.page())
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", what, k.resource, err)
	}
	lw := kubeapi.SlimListWatch(client, k.resource, k.page, c.transform)
	if kind == NodePods {
		lw = onNode(lw, c.keep.node)
	}
	inf := cache.NewSharedIndexInformerWithOptions(lw, k.obj, cache.SharedIndexInformerOptions{})
	if err := inf.SetTransform(c.transform); err != nil {
		return nil, fmt.Errorf("%s: %s: %w", what, k.resource, err)
	}
	c.informers[kind] = inf
	if c.ctx != nil {
		c.run(kind)
	}
	return inf, nil
}

// Handle registers h for kind's objects (*Pod of Pods and NodePods,
// *Namespace, *Node, *Service, *EndpointSlice or *ServiceCIDR, or a
// cache.DeletedFinalStateUnknown holding one on a delete): h is handed
// every object the informer holds (the informer's first list, or what it
// holds when h comes later), then every change, on a goroutine of h's
// own. The handler must not change what it is handed.
func (c *Cache) Handle(kind Kind, h cache.ResourceEventHandler) (*Handler, error) {
	if kind < 0 || kind >= numKinds {
		return nil, fmt.Errorf("cluster cache: no kind %d", int(kind))
	}
	kind = c.resolve(kind)
	c.mu.Lock()
	defer c.mu.Unlock()
	inf, err := c.informer(kind)
	if err != nil {
		return nil, err
	}
	out := &Handler{cache: c, kind: kind, inf: inf, h: h}
	reg, err := inf.AddEventHandler(out)
	if err != nil {
		return nil, fmt.Errorf("cluster cache: %s: %w", kind, err)
	}
	out.reg = reg
	c.readers[kind]++
	return out, nil
}

// release is a reader of inf gone: the last one's going stops inf.
func (c *Cache) release(kind Kind, inf cache.SharedIndexInformer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.informers[kind] != inf {
		return
	}
	if c.readers[kind]--; c.readers[kind] > 0 {
		return
	}
	if c.stop[kind] != nil {
		c.stop[kind]()
	}
	c.informers[kind], c.stop[kind] = nil, nil
}

// List is every object of kind the cache holds (none of a kind nobody
// handles).
func (c *Cache) List(kind Kind) []any {
	c.mu.Lock()
	var inf cache.SharedIndexInformer
	if kind >= 0 && kind < numKinds {
		inf = c.informers[c.resolve(kind)]
	}
	c.mu.Unlock()
	if inf == nil {
		return nil
	}
	return inf.GetStore().List()
}

// transform is slim as the informers' TransformFunc: it tells of a pod's
// network-status it cannot read.
func (c *Cache) transform(obj any) (any, error) {
	out, bad := slim(obj, c.keep)
	if bad != nil {
		p := out.(*Pod)
		c.log.Warn("pod's network-status not read: no MultiNetworkPolicy takes it as a peer", "pod", p.Key(), "err", bad)
	}
	return out, nil
}

// Get is the object of kind with key ("<namespace>/<name>", or the name
// of a node), if the cache holds it.
func (c *Cache) Get(kind Kind, key string) (any, bool) {
	c.mu.Lock()
	var inf cache.SharedIndexInformer
	if kind >= 0 && kind < numKinds {
		inf = c.informers[c.resolve(kind)]
	}
	c.mu.Unlock()
	if inf == nil {
		return nil, false
	}
	o, ok, err := inf.GetStore().GetByKey(key)
	return o, ok && err == nil
}

// onNode is lw with every list and watch of it restricted to the pods of
// node (field selector spec.nodeName=node).
func onNode(lw cache.ListerWatcher, node string) cache.ListerWatcher {
	sel := fields.OneTermEqualSelector("spec.nodeName", node).String()
	in := cache.ToListerWatcherWithContext(lw)
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = sel
			return in.ListWithContext(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = sel
			return in.WatchWithContext(ctx, opts)
		},
	}
}

// Handler is a handler Handle registered.
type Handler struct {
	cache *Cache
	kind  Kind
	inf   cache.SharedIndexInformer
	reg   cache.ResourceEventHandlerRegistration
	h     cache.ResourceEventHandler

	mu      sync.RWMutex // held (read) through each call of h
	stopped bool
}

// HasSynced reports whether the handler has been handed every object of
// the informer's first list (or of what it held when the handler came).
func (h *Handler) HasSynced() bool { return h.reg != nil && h.reg.HasSynced() }

// Stop removes the handler: once Stop returns, it is called no more. The
// informer's last handler stops it.
func (h *Handler) Stop() {
	h.mu.Lock()
	was := h.stopped
	h.stopped = true
	h.mu.Unlock()
	if was {
		return
	}
	if h.reg != nil {
		_ = h.inf.RemoveEventHandler(h.reg) // (fails only once the informer stopped: no call then either)
	}
	h.cache.release(h.kind, h.inf)
}

// OnAdd, OnUpdate and OnDelete hand the event to the handler unless it
// stopped.
func (h *Handler) OnAdd(obj any, initial bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if !h.stopped {
		h.h.OnAdd(obj, initial)
	}
}

func (h *Handler) OnUpdate(old, obj any) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if !h.stopped {
		h.h.OnUpdate(old, obj)
	}
}

func (h *Handler) OnDelete(obj any) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if !h.stopped {
		h.h.OnDelete(obj)
	}
}

// NodeAnnotations are the annotations the cache keeps of each Node
// (Config.NodeAnnotations).
func (c *Cache) NodeAnnotations() []string { return c.keep.nodeAnnotations }

// KeepsLoadBalancers reports whether the cache keeps the LoadBalancer
// IPAM's part of each Service (Config.LoadBalancer).
func (c *Cache) KeepsLoadBalancers() bool { return c.keep.loadBalancer != nil }
