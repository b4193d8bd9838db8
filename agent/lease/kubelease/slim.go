package kubelease

import (
	"context"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/cnibox/cnibox/agent/kubeapi"
)

// What the informers keep of a Node is what makes its lease: the name, the
// resource version, flannel's annotations and the pod CIDRs. A real Node
// carries far more (labels, managed fields, other annotations; status is not
// even decoded), and a 5,000-node cluster's worth of it was most of the
// agent's memory. Lists are paged, so the peak while listing stays near the
// steady size instead of holding one response of every whole Node.

// slim returns the part of n the lease backend reads, in a new object.
func (m *Manager) slim(n *kubeapi.Node) *kubeapi.Node {
	out := &kubeapi.Node{Spec: n.Spec}
	out.Name, out.ResourceVersion = n.Name, n.ResourceVersion
	if len(n.Spec.PodCIDRs) > 0 {
		out.Spec.PodCIDRs = append([]string(nil), n.Spec.PodCIDRs...)
	}
	for _, k := range m.an.all() {
		if v, ok := n.Annotations[k]; ok {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[k] = v
		}
	}
	return out
}

// fromMeta is the Node that a node's metadata describes, when its
// annotations carry the podCIDRs (MetaLabel).
func (m *Manager) fromMeta(p *metav1.PartialObjectMetadata) *kubeapi.Node {
	n := &kubeapi.Node{}
	n.Name, n.ResourceVersion, n.Annotations = p.Name, p.ResourceVersion, p.Annotations
	if s := p.Annotations[m.an.PodCIDRs]; s != "" {
		n.Spec.PodCIDRs = strings.Split(s, ",")
	}
	return m.slim(n)
}

// transform is the informers' TransformFunc: it slims Nodes, makes slim
// Nodes of metadata, and passes anything else through (it must be
// idempotent: listed Nodes are slim already).
func (m *Manager) transform(obj any) (any, error) {
	switch o := obj.(type) {
	case *kubeapi.Node:
		return m.slim(o), nil
	case *metav1.PartialObjectMetadata:
		return m.fromMeta(o), nil
	}
	return obj, nil
}

// nodesGVR is the resource the metadata client reads.
var nodesGVR = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}

// listWatch lists Nodes page by page, slimming each page before asking for
// the next, and watches them: whole Nodes, or with meta their metadata only
// (metav1.PartialObjectMetadata, in protobuf); labels selects which.
func (m *Manager) listWatch(meta bool, labels string) cache.ListerWatcher {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.LabelSelector = labels
			return m.listNodes(ctx, meta, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.Watch, opts.LabelSelector = true, labels
			if meta {
				return m.meta.Resource(nodesGVR).Watch(ctx, opts)
			}
			return m.c.Get().Resource("nodes").VersionedParams(&opts, metav1.ParameterCodec).Watch(ctx)
		},
	}
}

// listNodes reads every Node in pages (kubeapi.ListPages) and returns them
// slimmed.
func (m *Manager) listNodes(ctx context.Context, meta bool, opts metav1.ListOptions) (*kubeapi.NodeList, error) {
	out := &kubeapi.NodeList{}
	rv, err := kubeapi.ListPages(opts, func(opts metav1.ListOptions) (metav1.ListMeta, error) {
		if meta {
			page, err := m.meta.Resource(nodesGVR).List(ctx, opts)
			if err != nil {
				return metav1.ListMeta{}, err
			}
			for i := range page.Items {
				out.Items = append(out.Items, *m.fromMeta(&page.Items[i]))
			}
			return page.ListMeta, nil
		}
		page := &kubeapi.NodeList{}
		if err := m.c.Get().Resource("nodes").VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(page); err != nil {
			return metav1.ListMeta{}, err
		}
		for i := range page.Items {
			out.Items = append(out.Items, *m.slim(&page.Items[i]))
		}
		return page.ListMeta, nil
	})
	if err != nil {
		return nil, err
	}
	out.ResourceVersion = rv
	return out, nil
}
