package kubeapi

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// ObjectList is a list of objects of any type: what SlimListWatch hands the
// informer, whose items are the slim objects it keeps, not API types.
type ObjectList struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []runtime.Object
}

// DeepCopyObject implements runtime.Object (the items are shared: an
// informer never changes what it stores).
func (l *ObjectList) DeepCopyObject() runtime.Object {
	out := *l
	out.Items = slices.Clone(l.Items)
	return &out
}

// SlimListWatch lists resource's objects in every namespace page by page
// (ListPages), each page decoded into a new newPage() (a typed list) and
// each of its items made what slim returns before the next page is read;
// it watches them whole, for the informer's Transform (slim too) to slim
// each event. So the first list of a large cluster holds one page of whole
// objects at a time, never the whole cluster's: the pods of a 50,000-pod
// cluster decoded at once were most of the policy watcher's peak. slim must
// accept its own output.
func SlimListWatch(c rest.Interface, resource string, newPage func() runtime.Object, slim cache.TransformFunc) cache.ListerWatcher {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			out := &ObjectList{}
			rv, err := ListPages(opts, func(opts metav1.ListOptions) (metav1.ListMeta, error) {
				page := newPage()
				if err := c.Get().Resource(resource).VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(page); err != nil {
					return metav1.ListMeta{}, err
				}
				items, err := meta.ExtractList(page)
				if err != nil {
					return metav1.ListMeta{}, err
				}
				for _, it := range items {
					s, err := slim(it)
					if err != nil {
						return metav1.ListMeta{}, err
					}
					o, ok := s.(runtime.Object)
					if !ok {
						return metav1.ListMeta{}, fmt.Errorf("list %s: the slim form of %T is not an object", resource, it)
					}
					out.Items = append(out.Items, o)
				}
				lm, err := meta.ListAccessor(page)
				if err != nil {
					return metav1.ListMeta{}, err
				}
				return metav1.ListMeta{ResourceVersion: lm.GetResourceVersion(), Continue: lm.GetContinue()}, nil
			})
			out.ResourceVersion = rv
			return out, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.Watch = true
			return c.Get().Resource(resource).VersionedParams(&opts, metav1.ParameterCodec).Watch(ctx)
		},
	}
}

// NewSlimInformer is an informer of every namespace's objects of resource
// (decoded as obj's type) with a SlimListWatch, o.Transform being
// its slim (which it must have).
func NewSlimInformer(c rest.Interface, resource string, obj runtime.Object, newPage func() runtime.Object, o cache.InformerOptions) (cache.Store, cache.Controller) {
	o.ListerWatcher = SlimListWatch(c, resource, newPage, o.Transform)
	o.ObjectType = obj
	return cache.NewInformerWithOptions(o)
}
