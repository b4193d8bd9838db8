package kubeapi

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
)

// ListPageSize is the number of objects one list request of ListPages asks
// for.
const ListPageSize = 500

// ListPages lists in pages of ListPageSize from one consistent snapshot (the
// continue token keeps it): page lists one with the options given and
// returns its ListMeta; ListPages returns the last page's resource version.
// The resource version the reflector asks for is dropped: "0" would let the
// API server answer from its cache in one unpaged response, the whole
// cluster's objects in one allocation.
func ListPages(opts metav1.ListOptions, page func(metav1.ListOptions) (metav1.ListMeta, error)) (string, error) {
	opts.ResourceVersion, opts.ResourceVersionMatch = "", ""
	opts.Limit, opts.Continue = ListPageSize, ""
	for {
		lm, err := page(opts)
		if err != nil {
			return "", err
		}
		if lm.Continue == "" {
			return lm.ResourceVersion, nil
		}
		opts.Continue = lm.Continue
	}
}

// MetaListWatch lists and watches the metadata of gvr's objects in every
// namespace (metav1.PartialObjectMetadata, in protobuf), those that labels
// selects ("": all). A list goes page by page (ListPages) and slim makes
// each item of a page what the informer keeps before the next page is asked
// for; the informer's Transform should be slim as well (watch events, and
// client-go's streaming list, which reaches the store through it), so slim
// must accept its own output.
func MetaListWatch(mc metadata.Interface, gvr schema.GroupVersionResource, labels string, slim func(*metav1.PartialObjectMetadata) *metav1.PartialObjectMetadata) cache.ListerWatcher {
	r := mc.Resource(gvr)
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.LabelSelector = labels
			out := &metav1.PartialObjectMetadataList{}
			rv, err := ListPages(opts, func(opts metav1.ListOptions) (metav1.ListMeta, error) {
				page, err := r.List(ctx, opts)
				if err != nil {
					return metav1.ListMeta{}, err
				}
				for i := range page.Items {
					out.Items = append(out.Items, *slim(&page.Items[i]))
				}
				return page.ListMeta, nil
			})
			out.ResourceVersion = rv
			return out, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.Watch, opts.LabelSelector = true, labels
			return r.Watch(ctx, opts)
		},
	}
}

// SlimMeta keeps of an object's metadata its name, namespace and resource
// version: what an informer that only asks "does it exist?" needs (it drops
// managed fields, labels, annotations and owners).
func SlimMeta(p *metav1.PartialObjectMetadata) *metav1.PartialObjectMetadata {
	out := &metav1.PartialObjectMetadata{}
	out.Name, out.Namespace, out.ResourceVersion = p.Name, p.Namespace, p.ResourceVersion
	return out
}

// SlimMetaTransform is SlimMeta as an informer's TransformFunc (anything but
// metadata passes through).
func SlimMetaTransform(obj any) (any, error) {
	if p, ok := obj.(*metav1.PartialObjectMetadata); ok {
		return SlimMeta(p), nil
	}
	return obj, nil
}
