package kubelease

import (
	"context"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/agent/lease"
)

// MetaLabel marks a node whose annotations hold its whole lease, the
// podCIDRs included (Annotations.PodCIDRs): cnibox-agent sets both when it
// publishes. Peers watch such nodes by their metadata only, so a kubelet's
// status report of one (conditions, images: most of a Node's bytes) reaches
// each agent as a metadata event, about a quarter of the Node. Nodes without
// the label (flanneld's, older agents') are watched whole, as before.
const MetaLabel = "cnibox.io/overlay-metadata"

// Watch runs two node informers, one of the nodes with MetaLabel (metadata
// only) and one of the others (whole Nodes, for the podCIDR): a snapshot
// once both have synced, then the changes. A node that gains the label
// leaves one informer and enters the other, in either order: while the
// metadata informer has a node, its view of it wins.
func (m *Manager) Watch(ctx context.Context, fn func(lease.Update)) error {
	var (
		mu      sync.Mutex
		synced  bool
		views   = [2]map[string]*kubeapi.Node{{}, {}} // per informer: whole, metadata
		emitted = map[string]lease.Lease{}            // the lease last delivered per node
	)
	// settle delivers what changed for a node after one informer's event.
	settle := func(name string) {
		cur := views[1][name]
		if cur == nil {
			cur = views[0][name]
		}
		prev, had := emitted[name]
		if cur == nil {
			if had {
				delete(emitted, name)
				if synced {
					fn(lease.Update{Events: []lease.Event{{Type: lease.Removed, Lease: prev}}})
				}
			}
			return
		}
		l, err := m.nodeLease(cur, true)
		if err != nil || (had && sameLease(prev, l)) {
			return // as before: a node whose lease becomes unreadable stays as it was
		}
		emitted[name] = l
		if synced {
			fn(lease.Update{Events: []lease.Event{{Type: lease.Added, Lease: l}}})
		}
	}
	handle := func(src int, del bool, obj any) {
		n, ok := obj.(*kubeapi.Node)
		if !ok {
			if d, isDel := obj.(cache.DeletedFinalStateUnknown); isDel {
				n, ok = d.Obj.(*kubeapi.Node)
			}
			if !ok {
				return
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if del {
			delete(views[src], n.Name)
		} else {
			views[src][n.Name] = n
		}
		settle(n.Name)
	}
	sources := []struct {
		lw  cache.ListerWatcher
		obj runtime.Object
	}{
		{m.listWatch(false, "!"+MetaLabel), &kubeapi.Node{}},
		{m.listWatch(true, MetaLabel), &metav1.PartialObjectMetadata{}},
	}
	var synceds []cache.InformerSynced
	for i, s := range sources {
		_, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
			ListerWatcher: s.lw,
			ObjectType:    s.obj,
			Transform:     m.transform,
			ResyncPeriod:  resyncPeriod,
			Handler: cache.ResourceEventHandlerFuncs{
				AddFunc:    func(obj any) { handle(i, false, obj) },
				UpdateFunc: func(_, obj any) { handle(i, false, obj) },
				DeleteFunc: func(obj any) { handle(i, true, obj) },
			},
		})
		synceds = append(synceds, ctrl.HasSynced)
		go ctrl.Run(ctx.Done())
	}
	if !cache.WaitForCacheSync(ctx.Done(), synceds...) {
		return ctx.Err()
	}
	mu.Lock()
	synced = true
	snap := lease.Update{Snapshot: true}
	for _, l := range emitted {
		snap.Leases = append(snap.Leases, l)
	}
	fn(snap)
	mu.Unlock()
	<-ctx.Done()
	return ctx.Err()
}

// sameLease reports whether two leases program the same peer.
func sameLease(a, b lease.Lease) bool {
	x, y := a.Attrs, b.Attrs
	return a.Subnet == b.Subnet && a.Subnet6 == b.Subnet6 && x.PublicIP == y.PublicIP && x.PublicIPv6 == y.PublicIPv6 &&
		x.BackendType == y.BackendType && x.VNI == y.VNI && x.VNI6 == y.VNI6 &&
		x.VTEPMAC.String() == y.VTEPMAC.String() && x.VTEPMAC6.String() == y.VTEPMAC6.String() && lease.SameData(x, y)
}
