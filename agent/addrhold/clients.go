//go:build !nokube

package addrhold

import (
	"context"
	"fmt"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/cnibox/cnibox/agent/cluster"
	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/internal/kubecore"
)

// Clients are what a Member's controller reaches the API with: the node's
// name, the REST config (for the controller's own group), the clients of
// the core group (Nodes) and of coordination.k8s.io (Leases).
type Clients struct {
	Node        string
	REST        *rest.Config
	Core, Coord rest.Interface
}

// Connect names the node and makes the clients of cl; what starts the
// errors.
func Connect(cl kubeapi.Cluster, what string) (k Clients, err error) {
	if k.Node, err = kubecore.NodeName(cl.NodeName, what); err != nil {
		return k, err
	}
	if k.REST, err = cl.Config(what); err != nil {
		return k, err
	}
	if k.Core, err = kubecore.GroupClient(k.REST, corev1.SchemeGroupVersion, "/api", &corev1.Node{}); err != nil {
		return k, fmt.Errorf("%s: %w", what, err)
	}
	if k.Coord, err = kubecore.GroupClient(k.REST, coordv1.SchemeGroupVersion, "/apis", &coordv1.Lease{}, &coordv1.LeaseList{}); err != nil {
		return k, fmt.Errorf("%s: %w", what, err)
	}
	return k, nil
}

// Watched are the objects a Member's controller plans from: kinds of the
// agent's cache and one custom resource.
type Watched struct {
	Cache *cluster.Cache
	Kinds []cluster.Kind
	// Client serves Resource, whose objects are Object and lists List
	// (kubeapi.NewSlimInformer's).
	Client   rest.Interface
	Resource string
	Object   runtime.Object
	List     func() runtime.Object
}

// Watch registers on w's kinds of the cache and runs the informers of
// w's custom resource and of the Kind's Leases, until ctx ends; each event
// marks the plan dirty. It returns the custom resource's store.
func (m *Member) Watch(ctx context.Context, w Watched) (cache.Store, error) {
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { m.poke() },
		UpdateFunc: func(any, any) { m.poke() },
		DeleteFunc: func(any) { m.poke() },
	}
	for _, k := range w.Kinds {
		reg, err := w.Cache.Handle(k, h)
		if err != nil {
			return nil, err
		}
		context.AfterFunc(ctx, reg.Stop)
		m.synced = append(m.synced, reg.HasSynced)
	}
	objs, ctl := kubeapi.NewSlimInformer(w.Client, w.Resource, w.Object, w.List,
		cache.InformerOptions{Handler: h, Transform: func(o any) (any, error) { return o, nil }})
	go ctl.Run(ctx.Done())
	m.synced = append(m.synced, ctl.HasSynced)
	lw := cache.NewFilteredListWatchFromClient(m.coord, "leases", m.kind.Namespace, func(o *metav1.ListOptions) { o.LabelSelector = m.kind.Label })
	m.leases, ctl = cache.NewInformerWithOptions(cache.InformerOptions{ListerWatcher: lw, ObjectType: &coordv1.Lease{}, Handler: h})
	go ctl.Run(ctx.Done())
	m.synced = append(m.synced, ctl.HasSynced)
	return objs, nil
}

// poke marks the plan dirty.
func (m *Member) poke() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}
