//go:build !nokube

package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"k8s.io/client-go/tools/cache"

	"github.com/cnibox/cnibox/agent/cluster"
	"github.com/cnibox/cnibox/internal/policymodel"
)

// The trusted resolvers of domainNames peers (issue 60, finding 4): the
// DNS proxy learns only from the answers of the servers the operator
// trusts, by default the cluster DNS Service (kube-system/kube-dns): its
// cluster IPs and the addresses of its EndpointSlices' endpoints (the
// DNS table diverts a query after kube-proxy's DNAT, so it sees the
// endpoint), plus WatchConfig.DNSResolvers. A pod's query to any other
// server is one more connection of the pod's, which the policy table
// judges, and no one learns from its answer.

// SetResolvers sets the model's trusted resolvers (sorted, each once) and
// reports whether they changed. It changes no rule or set of the policy
// table: the DNS side (agent/policynft's DNS) follows the model.
func (e *Engine) SetResolvers(addrs []netip.Addr) bool {
	var out []netip.Addr
	for _, a := range addrs {
		if a = a.Unmap(); a.IsValid() {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	out = slices.Compact(out)
	if slices.Equal(out, e.m.Resolvers) {
		return false
	}
	e.writable()
	e.m.Resolvers = out
	return true
}

// ParseDNSService reads --dns-service's "<namespace>/<name>" ("" is none).
func ParseDNSService(s string) (ns, name string, err error) {
	if s == "" {
		return "", "", nil
	}
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("%q: want <namespace>/<name> of the cluster DNS Service, e.g. kube-system/kube-dns", s)
	}
	return ns, name, nil
}

// resolvers reads the DNS Service and its EndpointSlices (in its
// namespace, by name and by the kubernetes.io/service-name label) from
// the agent's informer cache, the Services and EndpointSlices the Services
// proxy and the LoadBalancer IPAM read: one list and one watch of each
// kind for the agent. It keeps of them the DNS Service's and its slices'
// own, so that another Service's event costs a comparison; on a change of
// those the watcher sets the model's resolvers.
type resolvers struct {
	w        *watcher
	ns, name string
	static   []netip.Addr
	mu       sync.Mutex // serialises the two kinds' handlers
	svc      *cluster.Service
	slices   map[string]*cluster.EndpointSlice // by key
}

// resolverHandlers registers the resolvers' handlers on the cache (none
// without a DNS Service: the static resolvers alone) and returns them.
func (w *watcher) resolverHandlers() ([]*cluster.Handler, error) {
	ns, name, err := ParseDNSService(w.cfg.DNSService)
	if err != nil {
		return nil, fmt.Errorf("the cluster DNS Service %w", err)
	}
	w.applyResolvers(w.cfg.DNSResolvers) // until the lists are in
	if name == "" {
		return nil, nil
	}
	r := &resolvers{w: w, ns: ns, name: name, static: w.cfg.DNSResolvers, slices: map[string]*cluster.EndpointSlice{}}
	var out []*cluster.Handler
	for kind, set := range map[cluster.Kind]func(any, bool) bool{cluster.Services: r.setService, cluster.EndpointSlices: r.setSlice} {
		h, err := w.cfg.Cache.Handle(kind, cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { r.on(o, true, set) },
			UpdateFunc: func(_, o any) { r.on(o, true, set) },
			DeleteFunc: func(o any) { r.on(o, false, set) },
		})
		if err != nil {
			for _, h := range out {
				h.Stop()
			}
			return nil, err
		}
		out = append(out, h)
	}
	return out, nil
}

// on hands o (there, or gone) to set, and sets the model's resolvers when
// set reports a change of the DNS Service's.
func (r *resolvers) on(o any, there bool, set func(any, bool) bool) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !set(o, there) {
		return
	}
	var svcs, eps []any
	if r.svc != nil {
		svcs = []any{r.svc}
	}
	for _, es := range r.slices {
		eps = append(eps, es)
	}
	r.w.applyResolvers(append(slices.Clone(r.static), resolverAddrs(svcs, eps)...))
}

// setService keeps o if it is the DNS Service (r.mu held) and reports
// whether that changed anything.
func (r *resolvers) setService(o any, there bool) bool {
	s, ok := o.(*cluster.Service)
	if !ok || s.Namespace != r.ns || s.Name != r.name {
		return false
	}
	if !there {
		s = nil
	}
	r.svc = s
	return true
}

// setSlice keeps o if it is a slice of the DNS Service, forgets it if it
// is not (any more), and reports whether that changed anything (r.mu
// held).
func (r *resolvers) setSlice(o any, there bool) bool {
	es, ok := o.(*cluster.EndpointSlice)
	if !ok || es.Namespace != r.ns {
		return false
	}
	key := es.Key()
	if there && es.Service == r.name {
		r.slices[key] = es
		return true
	}
	_, had := r.slices[key]
	delete(r.slices, key)
	return had
}

// applyResolvers sets the model's resolvers; a change is handed to the
// syncer (an empty delta: the DNS side reads the model).
func (w *watcher) applyResolvers(addrs []netip.Addr) {
	w.mu.Lock()
	defer w.mu.Unlock()
	changed := false
	w.changeLocked(func(e *Engine) policymodel.Delta {
		changed = e.SetResolvers(addrs)
		return policymodel.Delta{}
	}, false)
	if changed {
		w.cfg.Log.Info("domainNames: the trusted DNS resolvers", "addresses", w.e.current().Resolvers)
		w.applyLocked(policymodel.Delta{}, true)
	}
}

// resolverAddrs are the cluster IPs of svcs and the addresses of the
// endpoints of slices (the cache's *cluster.Service and
// *cluster.EndpointSlice), whatever their conditions: trust is who the
// server is, not whether it is ready.
func resolverAddrs(svcs, eps []any) []netip.Addr {
	var out []netip.Addr
	for _, o := range svcs {
		if s, ok := o.(*cluster.Service); ok {
			out = append(out, s.ClusterIPs...)
		}
	}
	for _, o := range eps {
		if es, ok := o.(*cluster.EndpointSlice); ok {
			for _, ep := range es.Endpoints {
				out = append(out, ep.Addr)
			}
		}
	}
	return out
}
