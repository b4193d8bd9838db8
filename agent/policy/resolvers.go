//go:build !nokube

package policy

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/cnibox/cnibox/internal/kubecore"
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

// resolverInformers are the informers of the DNS Service and its
// EndpointSlices (in its namespace, by name and by the
// kubernetes.io/service-name label); on each of their events the watcher
// sets the model's resolvers from both stores.
func (w *watcher) resolverInformers(ctx context.Context, core rest.Interface, rc *rest.Config) ([]cache.InformerSynced, error) {
	ns, name, err := ParseDNSService(w.cfg.DNSService)
	if err != nil {
		return nil, fmt.Errorf("the cluster DNS Service %w", err)
	}
	static := w.cfg.DNSResolvers
	if name == "" {
		w.applyResolvers(static)
		return nil, nil
	}
	disc, err := kubecore.GroupClient(rc, discoveryv1.SchemeGroupVersion, "/apis", &discoveryv1.EndpointSlice{}, &discoveryv1.EndpointSliceList{})
	if err != nil {
		return nil, err
	}
	var svcs, eps cache.Store
	update := func() {
		if svcs != nil && eps != nil {
			w.applyResolvers(append(slices.Clone(static), resolverAddrs(svcs.List(), eps.List())...))
		}
	}
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { update() },
		UpdateFunc: func(any, any) { update() },
		DeleteFunc: func(any) { update() },
	}
	svcs, svcCtl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: namespacedListWatch(core, ns, "services", func() runtime.Object { return &corev1.ServiceList{} },
			func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + name }),
		ObjectType: &corev1.Service{},
		Handler:    h,
	})
	eps, sliceCtl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: namespacedListWatch(disc, ns, "endpointslices", func() runtime.Object { return &discoveryv1.EndpointSliceList{} },
			func(o *metav1.ListOptions) { o.LabelSelector = discoveryv1.LabelServiceName + "=" + name }),
		ObjectType: &discoveryv1.EndpointSlice{},
		Handler:    h,
	})
	w.applyResolvers(static) // until the lists are in
	go svcCtl.RunWithContext(ctx)
	go sliceCtl.RunWithContext(ctx)
	return []cache.InformerSynced{svcCtl.HasSynced, sliceCtl.HasSynced}, nil
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
// endpoints of slices, whatever their conditions: trust is who the
// server is, not whether it is ready.
func resolverAddrs(svcs, eps []any) []netip.Addr {
	var out []netip.Addr
	add := func(s string) {
		if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, a)
		}
	}
	for _, o := range svcs {
		if s, ok := o.(*corev1.Service); ok {
			for _, ip := range s.Spec.ClusterIPs {
				add(ip)
			}
			add(s.Spec.ClusterIP)
		}
	}
	for _, o := range eps {
		if es, ok := o.(*discoveryv1.EndpointSlice); ok {
			for _, ep := range es.Endpoints {
				for _, ip := range ep.Addresses {
					add(ip)
				}
			}
		}
	}
	return out
}

// namespacedListWatch lists and watches resource in ns with opts as tweak
// makes them.
func namespacedListWatch(c rest.Interface, ns, resource string, newList func() runtime.Object, tweak func(*metav1.ListOptions)) cache.ListerWatcher {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			tweak(&opts)
			out := newList()
			err := c.Get().Namespace(ns).Resource(resource).VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(out)
			return out, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			tweak(&opts)
			opts.Watch = true
			return c.Get().Namespace(ns).Resource(resource).VersionedParams(&opts, metav1.ParameterCodec).Watch(ctx)
		},
	}
}
