//go:build !nokube

package policy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	goruntime "runtime"
	"slices"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/cnibox/cnibox/agent/cluster"
	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/agent/loggedflows"
	"github.com/cnibox/cnibox/internal/kubecore"
	"github.com/cnibox/cnibox/internal/policymodel"
)

// Syncer is the nftables side (agent/policynft's Syncer): it applies
// each change of the model, in order, from one goroutine at a time. The
// first call, once every informer has synced, carries the whole model
// (Rules and every set in AddSets); none comes before, so a half-listed
// cluster is never enforced. The model is valid during the call only,
// unless the Syncer is a Handoff.
type Syncer interface {
	Apply(m *policymodel.Model, d policymodel.Delta) error
}

// A Handoff is a Syncer that keeps the model handed to it and commits on
// a goroutine of its own (agent/policynft's): Apply and Offer hand the
// model over, Full the whole model of a new engine (the first sync of a
// watch); before the engine changes the model, Withdraw takes it back and
// reports whether the Syncer kept it, and the engine then copies on write
// (cow.go) instead of changing it in place. The Syncer never takes the
// watcher's lock, and a model is handed out once per transaction, not per
// change.
type Handoff interface {
	Syncer
	Full(m *policymodel.Model) error
	Offer(m *policymodel.Model)
	Withdraw() (kept bool)
}

// WatchConfig configures Watch.
type WatchConfig struct {
	kubeapi.Cluster
	Log    *slog.Logger
	Syncer Syncer
	// Cache is the agent's informer cache of pods, namespaces and nodes
	// (and, with DomainNames, Services and EndpointSlices: the DNS
	// Service's; agent/cluster), which the watcher reads with the agent's
	// other readers; nil: Watch makes one of its own, run while it runs.
	Cache *cluster.Cache
	// NodeAddrs are the node's own addresses (traffic from them to the
	// node's pods is always allowed).
	NodeAddrs []netip.Addr
	// ClusterNetworkPolicies watches policy.networking.k8s.io's
	// ClusterNetworkPolicies, v1beta1 where the API serves it, else
	// v1alpha2 (cnp_version.go; the CRD must be installed).
	ClusterNetworkPolicies bool
	// Synced, if set, is called once the first full sync has been applied
	// (the agent returns the garbage of the informers' first lists then).
	Synced func()
	// FlowLog, if set, is where the verdicts the table logs are written
	// (docs/flowlog.md): those of the namespaces annotated
	// cnibox.io/flow-log, and FlowLogAll everywhere.
	FlowLog    FlowLogWriter
	FlowLogAll FlowLogSetting
	// ServiceOf, if set, names the Service port a frontend is, for the
	// flow log's record of a connection to a Service (the agent's
	// Services proxy: its last snapshot's FrontendOf).
	ServiceOf ServiceNamer
	// FlowLogCounts, if set, counts the logged verdicts by policy (the
	// agent's metrics).
	FlowLogCounts *loggedflows.Counts
	// Admitter, if set, is handed the watcher once its first full sync is
	// applied: it answers the pod API's policy operations (admit.go).
	Admitter *Admitter
	// DomainNames: the DNS proxy of domainNames peers runs, and learns
	// only from the trusted resolvers (resolvers.go): the cluster DNS
	// Service DNSService ("<namespace>/<name>", "" for none), its cluster
	// IPs and endpoints, and DNSResolvers.
	DomainNames  bool
	DNSService   string
	DNSResolvers []netip.Addr
}

// Watch reads pods, namespaces (and nodes; with DomainNames the DNS
// Service and its EndpointSlices) from the cache, and runs
// informers of NetworkPolicies (and ClusterNetworkPolicies), until ctx
// ends, feeding an Engine and handing its
// deltas to the Syncer. It logs every issue of the model when the issues
// change, and records a Warning Event (reason PolicyNotExpressible) on the
// policy of each new one. When the API starts or stops serving a policy
// resource it watches or could (a ClusterNetworkPolicy CRD installed or
// upgraded after the agent, the staged policies' CRDs), it watches again
// from the start (rediscover.go); the kernel keeps the last rules
// meanwhile.
func Watch(ctx context.Context, cfg WatchConfig) error {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Cache == nil {
		cfg.Cache = cluster.New(cfg.Cluster, cfg.Log)
		cfg.Cache.Start(ctx)
	}
	for {
		err := watchOnce(ctx, cfg)
		if !errors.Is(err, errAPIChanged) {
			return err
		}
		cfg.Log.Info("network policy: the API's policy resources changed: watching them again", "change", err)
	}
}

// watchOnce is one Watch, until ctx ends (nil) or the API's policy resources
// change (errAPIChanged); every goroutine it started has ended when it
// returns.
func watchOnce(ctx context.Context, cfg WatchConfig) error {
	const what = "network policy watcher"
	ctx, cancel := context.WithCancelCause(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(nil); wg.Wait() }()
	run := func(f func()) {
		wg.Add(1)
		go func() { defer wg.Done(); f() }()
	}
	// ended is what watchOnce returns once ctx is done: nil when the caller's
	// ended, errAPIChanged when rediscover saw a change.
	ended := func() error {
		if err := context.Cause(ctx); errors.Is(err, errAPIChanged) {
			return err
		}
		return nil
	}
	node, err := kubecore.NodeName(cfg.NodeName, what)
	if err != nil {
		return err
	}
	rc, err := cfg.Config(what)
	if err != nil {
		return err
	}
	w := &watcher{e: NewEngine(node), cfg: cfg}
	w.e.SetNodeAddrs(cfg.NodeAddrs)
	if cfg.FlowLog != nil {
		w.e.SetFlowLog(cfg.FlowLogAll)
	}
	w.e.Hold() // through the first lists: one rebuild in start (hold.go)
	core, err := kubecore.GroupClient(kubeapi.Protobuf(rc), corev1.SchemeGroupVersion, "/api", &corev1.Event{})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	netv1, err := kubecore.GroupClient(kubeapi.Protobuf(rc), networkingv1.SchemeGroupVersion, "/apis", &networkingv1.NetworkPolicy{}, &networkingv1.NetworkPolicyList{})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	w.ev = newEventer(core, node, cfg.Log)
	run(func() { w.ev.run(ctx) })
	type informer struct {
		c        rest.Interface
		resource string
		obj      runtime.Object
		page     func() runtime.Object
	}
	kinds := []cluster.Kind{cluster.Pods, cluster.Namespaces} // the cache's
	informers := []informer{
		{netv1, "networkpolicies", &networkingv1.NetworkPolicy{}, func() runtime.Object { return &networkingv1.NetworkPolicyList{} }},
	}
	seen := apiSeen{}
	if cfg.ClusterNetworkPolicies {
		if gv, ok := cnpVersion(ctx, core, cfg.Log); ok {
			seen.cnp = gv.String()
		} else {
			cfg.Log.Warn("network policy: the API serves no ClusterNetworkPolicy (policy.networking.k8s.io v1beta1 or v1alpha2): install network-policy-api's CRD; NetworkPolicies are enforced meanwhile, ClusterNetworkPolicies once the CRD is in")
		}
	}
	if seen.cnp != "" {
		gv, _ := schema.ParseGroupVersion(seen.cnp)
		w.cnpVersion = seen.cnp
		// The nodes of a `nodes` peer (nodes.go): only ClusterNetworkPolicy
		// has that peer.
		kinds = append(kinds, cluster.Nodes)
		c, err := kubecore.GroupClient(rc, gv, "/apis", &cnpv1.ClusterNetworkPolicy{}, &cnpv1.ClusterNetworkPolicyList{})
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		informers = append(informers, informer{c, "clusternetworkpolicies", &cnpv1.ClusterNetworkPolicy{},
			func() runtime.Object { return &cnpv1.ClusterNetworkPolicyList{} }})
	}
	if cfg.FlowLog != nil {
		// Staged policies are evaluated for the flow log only; their
		// CRDs are optional.
		staged := servedStaged(ctx, core)
		seen.staged = staged
		if len(staged) > 0 {
			sc, err := kubecore.GroupClient(rc, StagedGroupVersion(), "/apis", &StagedNetworkPolicy{}, &StagedNetworkPolicyList{},
				&StagedClusterNetworkPolicy{}, &StagedClusterNetworkPolicyList{})
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			if slices.Contains(staged, "stagednetworkpolicies") {
				informers = append(informers, informer{sc, "stagednetworkpolicies", &StagedNetworkPolicy{},
					func() runtime.Object { return &StagedNetworkPolicyList{} }})
			}
			if slices.Contains(staged, "stagedclusternetworkpolicies") {
				informers = append(informers, informer{sc, "stagedclusternetworkpolicies", &StagedClusterNetworkPolicy{},
					func() runtime.Object { return &StagedClusterNetworkPolicyList{} }})
			}
			cfg.Log.Info("network policy: staged policies are evaluated for the flow log", "resources", staged)
		}
	}
	var synced []cache.InformerSynced
	for _, k := range kinds {
		h, err := cfg.Cache.Handle(k, w.handler())
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		defer h.Stop() // (before wg.Wait: no event reaches an engine that ended)
		synced = append(synced, h.HasSynced)
	}
	for _, in := range informers {
		_, ctl := kubeapi.NewSlimInformer(in.c, in.resource, in.obj, in.page, cache.InformerOptions{
			Handler:   w.handler(),
			Transform: slim,
		})
		run(func() { ctl.RunWithContext(ctx) })
		synced = append(synced, ctl.HasSynced)
	}
	run(func() { w.rediscover(ctx, cancel, core, seen, rediscoverEvery) })
	if cfg.DomainNames {
		rs, err := w.resolverHandlers()
		if err != nil {
			return fmt.Errorf("%s: domainNames: %w", what, err)
		}
		for _, h := range rs {
			defer h.Stop()
			synced = append(synced, h.HasSynced)
		}
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		if err := ended(); err != nil {
			return err
		}
		return ctx.Err()
	}
	if err := w.start(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if sy, ok := cfg.Syncer.(interface{ Wait(context.Context) error }); ok {
		// (a Handoff commits on its own goroutine, and tries a failure
		// again: the first full sync is in once this returns)
		if err := sy.Wait(ctx); err != nil {
			if err := ended(); err != nil {
				return err
			}
			return ctx.Err()
		}
	}
	if cfg.Admitter != nil {
		cfg.Admitter.set(w)
		defer cfg.Admitter.set(nil)
	}
	if cfg.FlowLog != nil {
		run(func() { w.runFlowLog(ctx, cfg.FlowLog, cfg.FlowLogCounts, cfg.Log) })
	}
	if cfg.Synced != nil {
		cfg.Synced()
	}
	<-ctx.Done()
	return ended()
}

// watcher serialises the informers' events into the engine and the syncer.
type watcher struct {
	cfg     WatchConfig
	mu      sync.Mutex // every change of the engine and the syncer's call
	e       *Engine
	ev      *eventer
	started atomic.Bool // the first full sync is applied
	// cnpVersion is the ClusterNetworkPolicy version watched (its Events'
	// apiVersion).
	cnpVersion string
	// latest is the number of each policy's last event (by ID, under
	// seqMu): a compile that a later event overtook is dropped.
	seqMu  sync.Mutex
	seq    uint64
	latest map[string]uint64
	// compiling bounds the compiles running at once after the first sync
	// (made with latest): a flood of policy events queues goroutines, not
	// a compile's CPU and memory each at the same time, and a queued
	// compile that a later event of its policy overtook never starts.
	compiling chan struct{}
	// beforeCompile, if set (tests), runs before a policy is compiled.
	beforeCompile func(id string)
	// badFlowLog: the bad flow log annotation warned of, by namespace.
	badFlowLog map[string]string
	// stagedEval evaluates the flow log's staged verdicts (stagedeval.go).
	stagedEval stagedEvals
	// admitted holds, by pod, the addresses its ADD admitted while its
	// status has none; podEv is closed at the next pod event (admit.go;
	// both under mu).
	admitted map[string][]netip.Addr
	podEv    chan struct{}
}

// start hands the whole model to the syncer, once every informer has
// synced: a Handoff replaces the whole table with it (Full), whatever an
// earlier watch left there.
func (w *watcher) start() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.started.Store(true)
	w.e.Release() // its delta is in the whole model handed over here
	m := w.e.current()
	d := policymodel.Delta{Rules: true, Issues: len(m.Issues) > 0}
	for id := range m.Sets {
		d.AddSets = append(d.AddSets, id)
	}
	w.logIssues(d)
	if h, ok := w.cfg.Syncer.(Handoff); ok {
		return h.Full(m)
	}
	return w.cfg.Syncer.Apply(m, d)
}

// apply runs one change of the engine and hands its delta to the syncer.
func (w *watcher) apply(change func(*Engine) policymodel.Delta) { w.applyIf(change, false) }

// applyIf is apply; always hands the syncer an empty delta too (a pod of
// this node: the syncer takes its addresses out of the pending set).
func (w *watcher) applyIf(change func(*Engine) policymodel.Delta, always bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.changeLocked(change, always)
}

// changeLocked runs one change of the engine and hands the syncer its
// delta (w.mu held): a Handoff's model is taken back first, and if the
// syncer kept it, the engine copies it on write.
func (w *watcher) changeLocked(change func(*Engine) policymodel.Delta, always bool) {
	if h, ok := w.cfg.Syncer.(Handoff); ok && w.started.Load() && h.Withdraw() {
		w.e.Model() // handed out: never changed again
	}
	w.applyLocked(change(w.e), always)
}

func (w *watcher) logIssues(d policymodel.Delta) {
	if !d.Issues {
		return
	}
	if w.ev != nil {
		w.ev.note(w.e.current().Issues)
	}
	for _, is := range w.e.current().Issues {
		w.cfg.Log.Warn("network policy cannot be expressed; it fails closed", "policy", is.Policy, "field", is.Field, "value", is.Value, "reason", is.Reason)
	}
}

// warnFlowLog logs, and records as a Warning Event on the namespace, a
// flow log annotation that does not parse, once per value.
func (w *watcher) warnFlowLog(o *cluster.Namespace, ns *Namespace) {
	if ns.FlowLogBad == "" || w.cfg.FlowLog == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.badFlowLog == nil {
		w.badFlowLog = map[string]string{}
	}
	if w.badFlowLog[o.Name] == ns.FlowLogBad {
		return
	}
	w.badFlowLog[o.Name] = ns.FlowLogBad
	w.cfg.Log.Warn("flow log: a namespace's annotation is not deny, allow or allow,deny; nothing of it is logged",
		"namespace", o.Name, "annotation", FlowLogAnnotation, "value", ns.FlowLogBad)
	if w.ev != nil {
		w.ev.badFlowLog(namespaceRef(o), ns.FlowLogBad)
	}
}

// namespaceRef is the reference of the cache's namespace o (its Events').
func namespaceRef(o *cluster.Namespace) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: "v1", Kind: "Namespace", Name: o.Name, UID: o.GetObjectMeta().GetUID(), ResourceVersion: o.ResourceVersion}
}

// ref records the object of policy id for its Events (nil: gone).
func (w *watcher) ref(id string, r *corev1.ObjectReference) {
	if w.ev != nil {
		w.ev.ref(id, r)
	}
}

// setPolicy compiles a policy (the costly part of its change: its sets)
// without the lock, then sets it in the engine under it. Once the first
// sync is applied the compile runs on a goroutine of its own, so neither
// the informer's next event nor any other change waits for a large
// policy; before, it runs here, since start must find every listed
// policy in the engine.
func (w *watcher) setPolicy(id string, ref *corev1.ObjectReference, compile func() *compiled) {
	n := w.number(id)
	run := func() {
		if w.beforeCompile != nil {
			w.beforeCompile(id)
		}
		c := compile()
		w.apply(func(e *Engine) policymodel.Delta {
			if !w.isLatest(id, n, false) {
				return policymodel.Delta{} // a later event of the policy came first
			}
			w.ref(id, ref)
			return e.setCompiled(c)
		})
	}
	if !w.started.Load() {
		run()
		return
	}
	go func() {
		slots := w.slots()
		slots <- struct{}{}
		defer func() { <-slots }()
		if w.isLatest(id, n, false) {
			run()
		}
	}()
}

// slots is the semaphore of the compiles that run at once: as many as the
// process has CPUs, at least two, so one large policy never holds up the
// next.
func (w *watcher) slots() chan struct{} {
	w.seqMu.Lock()
	defer w.seqMu.Unlock()
	if w.compiling == nil {
		w.compiling = make(chan struct{}, max(2, goruntime.GOMAXPROCS(0)))
	}
	return w.compiling
}

// deletePolicy removes a policy, and any compile of it still running.
func (w *watcher) deletePolicy(id string, del func(*Engine) policymodel.Delta) {
	n := w.number(id)
	w.apply(func(e *Engine) policymodel.Delta {
		if !w.isLatest(id, n, true) {
			return policymodel.Delta{}
		}
		w.ref(id, nil)
		return del(e)
	})
}

// number numbers an event of policy id: the latest of id.
func (w *watcher) number(id string) uint64 {
	w.seqMu.Lock()
	defer w.seqMu.Unlock()
	if w.latest == nil {
		w.latest = map[string]uint64{}
	}
	w.seq++
	w.latest[id] = w.seq
	return w.seq
}

// isLatest reports whether n is the latest event of policy id; forget
// drops the policy's number then (it is gone).
func (w *watcher) isLatest(id string, n uint64, forget bool) bool {
	w.seqMu.Lock()
	defer w.seqMu.Unlock()
	ok := w.latest[id] == n
	if ok && forget {
		delete(w.latest, id)
	}
	return ok
}
