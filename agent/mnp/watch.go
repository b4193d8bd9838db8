//go:build !nokube

package mnp

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/cnibox/cnibox/agent/cluster"
	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/agent/policynft"
	"github.com/cnibox/cnibox/internal/kubecore"
	"github.com/cnibox/cnibox/store"
)

// Config configures a Watcher.
type Config struct {
	kubeapi.Cluster
	Log *slog.Logger
	// Cache is the agent's informer cache of pods and namespaces
	// (agent/cluster), which the watcher reads with the agent's other
	// readers; nil: Run makes one of its own, run while it runs.
	Cache *cluster.Cache
	// DataDir is the node's store (store.Dir): the CNI calls record each
	// pod's network namespace there.
	DataDir string
	// Syncer is the agent's syncer of the policy tables (agent/policynft),
	// which writes the pods' tables on its loop, with its retries and its
	// resync; nil: Run makes one of its own, run while it runs, which
	// writes every pod's table again each Resync (0: 30 s).
	Syncer *policynft.Syncer
	Resync time.Duration
}

// Watcher is the MultiNetworkPolicy input of the policy tables' syncer:
// it reads pods (their labels and attachments) and namespaces from the
// cache and watches MultiNetworkPolicies, and tells the syncer of each
// change; the syncer's loop resolves the pods' tables then (Tables) and
// writes those that changed. Admit writes a new pod's table before its
// CNI ADD returns.
type Watcher struct {
	cfg  Config
	node string

	mu       sync.Mutex
	pods     map[string]*Pod // by "<namespace>/<name>": the node's, and pods with attachments
	ns       map[string]*policy.Namespace
	policies map[string]*Policy
	podEv    chan struct{} // closed (and replaced) at each pod event
	synced   bool          // every informer has listed

	nsMu  sync.Mutex        // netns
	netns map[string]string // per pod, its namespace's path
}

// New returns a watcher for the node of cfg.
func New(cfg Config) (*Watcher, error) {
	node, err := kubecore.NodeName(cfg.NodeName, "multi-network policy watcher")
	if err != nil {
		return nil, err
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Watcher{
		cfg: cfg, node: node,
		pods: map[string]*Pod{}, ns: map[string]*policy.Namespace{}, policies: map[string]*Policy{},
		podEv: make(chan struct{}), netns: map[string]string{},
	}, nil
}

// Run watches until ctx ends. The syncer writes the tables once every
// informer has listed, and after each change; a table that could not be
// written is tried again after a wait (and at the next change), and every
// table is written again at each resync of the syncer.
func (w *Watcher) Run(ctx context.Context) error {
	const what = "multi-network policy watcher"
	rc, err := w.cfg.Config(what)
	if err != nil {
		return err
	}
	mc, err := kubecore.GroupClient(rc, GroupVersion(), "/apis", &MultiNetworkPolicy{}, &MultiNetworkPolicyList{})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if w.cfg.Cache == nil {
		w.cfg.Cache = cluster.New(w.cfg.Cluster, w.cfg.Log)
		w.cfg.Cache.Start(ctx)
	}
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.set(o) },
		UpdateFunc: func(_, o any) { w.set(o) },
		DeleteFunc: w.del,
	}
	var synced []cache.InformerSynced
	for _, k := range []cluster.Kind{cluster.Pods, cluster.Namespaces} {
		reg, err := w.cfg.Cache.Handle(k, h)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		defer reg.Stop()
		synced = append(synced, reg.HasSynced)
	}
	// The policies' informer starts once the CRD is served (crd.go).
	if err := waitServed(ctx, mc, crdEvery, w.cfg.Log); err != nil {
		return err
	}
	_, ctl := kubeapi.NewSlimInformer(mc, "multi-networkpolicies", &MultiNetworkPolicy{}, func() runtime.Object { return &MultiNetworkPolicyList{} },
		cache.InformerOptions{Handler: h, Transform: w.slim})
	go ctl.RunWithContext(ctx)
	synced = append(synced, ctl.HasSynced)
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return ctx.Err()
	}
	if w.cfg.Syncer == nil {
		sy, err := policynft.New("")
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		defer sy.Close()
		sy.ResyncEvery(cmp.Or(w.cfg.Resync, resyncEvery))
		w.mu.Lock()
		w.cfg.Syncer = sy
		w.mu.Unlock()
		sctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); sy.Run(sctx, w.cfg.Log) }()
		defer func() { stop(); <-done }()
	}
	w.mu.Lock()
	w.synced = true
	w.mu.Unlock()
	w.cfg.Log.Info("multi-network policy: watching", "node", w.node)
	w.cfg.Syncer.SetPodSource(w.Tables)
	defer w.cfg.Syncer.SetPodSource(nil)
	<-ctx.Done()
	return nil
}

// resyncEvery is the resync of a syncer of the watcher's own (Config's
// Syncer nil: tests); the agent's is --policy-resync.
const resyncEvery = 30 * time.Second

// slimPolicy is what the policies' informer keeps.
type slimPolicy = policy.SlimObj[Policy]

// slim is the policies' informer's transform (pods and namespaces are the
// cache's, slim already).
func (w *Watcher) slim(obj any) (any, error) {
	switch o := obj.(type) {
	case *MultiNetworkPolicy:
		nets, err := PolicyFor(o.Namespace, o.Annotations[PolicyForAnnotation])
		if err != nil {
			w.cfg.Log.Warn("multi-network policy: the policy is for no network", "policy", o.Namespace+"/"+o.Name, "err", err)
		}
		np := &networkingv1.NetworkPolicy{ObjectMeta: policy.SlimMeta(&o.ObjectMeta), Spec: *o.Spec.DeepCopy()}
		if !PolicyTypesAsTheAnchor(&np.Spec) {
			nets = nil // isolates nothing, as with the anchor
		}
		return &slimPolicy{ObjectMeta: policy.SlimMeta(&o.ObjectMeta), Obj: Policy{NP: np, Networks: nets}}, nil
	}
	return obj, nil
}

func (w *Watcher) set(o any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch o := o.(type) {
	case *Pod:
		// A pod without secondary attachments is no MultiNetworkPolicy's
		// peer, and none selects it; but a pod of the node without them
		// yet is Admit's.
		key := o.Key()
		if len(o.Attachments) == 0 && o.Node != w.node {
			if w.pods[key] == nil {
				return // nothing to change
			}
			delete(w.pods, key)
		} else {
			w.pods[key] = o
		}
		close(w.podEv)
		w.podEv = make(chan struct{})
	case *cluster.Namespace:
		w.ns[o.Name] = policy.NamespaceOf(o)
	case *slimPolicy:
		p := o.Obj
		w.policies[o.Namespace+"/"+o.Name] = &p
	default:
		return
	}
	w.changed()
}

func (w *Watcher) del(o any) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch o := o.(type) {
	case *Pod:
		delete(w.pods, o.Key())
	case *cluster.Namespace:
		delete(w.ns, o.Name)
	case *slimPolicy:
		delete(w.policies, o.Namespace+"/"+o.Name)
	default:
		return
	}
	w.changed()
}

// changed tells the syncer (w.mu held).
func (w *Watcher) changed() {
	if !w.synced {
		return // the first sync comes after the lists
	}
	w.cfg.Syncer.PodTablesChanged()
}

// input is the Resolve input of what the informers hold, with extra
// replacing the pod of its key (Admit's, from the ADD).
func (w *Watcher) input(extra *Pod) Input {
	w.mu.Lock()
	defer w.mu.Unlock()
	in := Input{Node: w.node}
	for k, p := range w.pods {
		if extra != nil && k == extra.Key() {
			continue
		}
		in.Pods = append(in.Pods, p)
	}
	if extra != nil {
		in.Pods = append(in.Pods, extra)
	}
	for _, ns := range w.ns {
		in.Namespaces = append(in.Namespaces, ns)
	}
	for _, p := range w.policies {
		in.Policies = append(in.Policies, p)
	}
	return in
}

// Tables is the syncer's PodSource: the table of every pod of the node
// with secondary networks, resolved from what the informers hold (the
// watcher's lock is held to copy that, not to resolve it).
func (w *Watcher) Tables() map[string]policynft.PodTable {
	return w.tables(w.input(nil), "")
}

// tables resolves in; only, if not "", limits the answer to one pod.
func (w *Watcher) tables(in Input, only string) map[string]policynft.PodTable {
	// this node's pods' addresses: the ADDs' records (trust.go)
	rec, err := recordedIPs(w.cfg.DataDir)
	if err != nil {
		w.cfg.Log.Warn("multi-network policy: this node's pods are no peers until the store is read", "err", err)
	}
	in = trustLocal(in, w.node, rec)
	want := Resolve(in)
	out := map[string]policynft.PodTable{}
	for _, p := range in.Pods {
		k := p.Key()
		if p.Node != w.node || len(p.Attachments) == 0 || (only != "" && k != only) {
			continue
		}
		path, err := w.netnsOf(k)
		out[k] = policynft.PodTable{Netns: path, Policy: want[k], Err: err}
	}
	w.nsMu.Lock()
	for k := range w.netns {
		if _, ok := out[k]; !ok && only == "" {
			delete(w.netns, k) // gone: its namespace went with it
		}
	}
	w.nsMu.Unlock()
	return out
}

// errNoNetns is netnsOf's answer for a pod the store holds no namespace
// of.
var errNoNetns = errors.New("no network namespace of the pod in the node's store")

// netnsOf is the path of pod k's network namespace, from the endpoints the
// CNI calls recorded (the newest with a namespace).
func (w *Watcher) netnsOf(k string) (string, error) {
	w.nsMu.Lock()
	p, ok := w.netns[k]
	w.nsMu.Unlock()
	if ok {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		} // a namespace gone (a new sandbox): looked up again
	}
	ns, name, _ := strings.Cut(k, "/")
	st, err := store.OpenWith(store.Dir(w.cfg.DataDir), store.Options{NoCreate: true})
	if err != nil {
		return "", fmt.Errorf("pod %s: %w", k, err)
	}
	eps, err := st.Endpoints("")
	st.Close()
	if err != nil {
		return "", fmt.Errorf("pod %s: %w", k, err)
	}
	var best store.Endpoint
	for _, e := range eps {
		if e.PodNamespace == ns && e.PodName == name && e.Netns != "" && !e.Created.Before(best.Created) {
			best = e
		}
	}
	if best.Netns == "" {
		return "", fmt.Errorf("pod %s: %w", k, errNoNetns)
	}
	p = hostPath(best.Netns)
	w.nsMu.Lock()
	w.netns[k] = p
	w.nsMu.Unlock()
	return p, nil
}

// hostPath is path as this process sees it: a runtime's /var/run/netns is
// /run/netns (the DaemonSet mounts the latter).
func hostPath(path string) string {
	if rest, ok := strings.CutPrefix(path, "/var/run/"); ok {
		if _, err := os.Stat(path); err != nil {
			return "/run/" + rest
		}
	}
	return path
}

// Admit writes the table of pod namespace/name of this node as its
// network-status (the one the multi role has just written) makes it,
// before the pod's CNI ADD returns: a pod a policy isolates is isolated
// from its first packet, and allowed what its policies allow at once. It
// waits (until ctx ends) for the pod informer to have the pod (its
// labels). Without a MultiNetworkPolicy for one of its networks, it
// writes nothing.
func (w *Watcher) Admit(ctx context.Context, namespace, name string, status json.RawMessage) error {
	atts, err := ParseNetworkStatus(string(status))
	if err != nil || len(atts) == 0 {
		return err
	}
	key := namespace + "/" + name
	var p *Pod
	for {
		w.mu.Lock()
		var ev chan struct{}
		p, ev = w.pods[key], w.podEv
		w.mu.Unlock()
		if p != nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("multi-network policy: pod %s not seen by the watcher: %w", key, ctx.Err())
		case <-ev:
		}
	}
	// (p is the informer's, which may lack the new attachments yet.)
	extra := *p
	extra.Attachments = atts
	extra.Node = w.node
	t, ok := w.tables(w.input(&extra), key)[key]
	if !ok {
		return nil
	}
	w.mu.Lock()
	sy := w.cfg.Syncer
	w.mu.Unlock()
	if sy == nil {
		return fmt.Errorf("multi-network policy: pod %s: the watcher is not running", key)
	}
	if err := sy.ApplyPodTable(key, t); err != nil {
		return fmt.Errorf("multi-network policy: pod %s: %w", key, err)
	}
	return nil
}
