//go:build !nokube

package clusteripam

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/cnibox/cnibox/agent/kubeapi"
)

// The reclaim asks one question of the cluster's pods: does pod
// "namespace/name" exist? The Lease's holder answers it from an informer of
// the pods' metadata (PartialObjectMetadata in protobuf, listed in pages)
// that keeps the name, the namespace and the resource version of each pod
// (kubeapi.SlimMeta): no managed fields, labels or owners. It lists once when
// the agent takes the Lease, then follows the watch, and is stopped when the
// Lease moves on, so the other agents hold nothing. Before, every scan (15 s)
// listed every pod's metadata, managed fields included, in one unpaged JSON
// response.

// podsGVR is the resource the pod informer reads.
var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// podCache is the running pod informer.
type podCache struct {
	store cache.Store
	ctrl  cache.Controller
	stop  context.CancelFunc
}

// podsSynced starts the pod informer if it is not running and returns
// whether a pod exists; nil when the informer has not listed the pods
// within an interval (the scan waits for the next tick).
func (r *Reclaimer) podsSynced(ctx context.Context) func(string) bool {
	if r.pods == nil {
		store, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
			ListerWatcher: kubeapi.MetaListWatch(r.meta, podsGVR, "", kubeapi.SlimMeta),
			ObjectType:    &metav1.PartialObjectMetadata{},
			Transform:     kubeapi.SlimMetaTransform,
			Handler:       cache.ResourceEventHandlerFuncs{},
		})
		ctx, stop := context.WithCancel(ctx)
		r.pods = &podCache{store: store, ctrl: ctrl, stop: stop}
		go ctrl.Run(ctx.Done())
	}
	if !r.pods.ctrl.HasSynced() {
		wait, cancel := context.WithTimeout(ctx, r.Interval)
		defer cancel()
		if !cache.WaitForCacheSync(wait.Done(), r.pods.ctrl.HasSynced) {
			return nil
		}
	}
	store := r.pods.store
	return func(podRef string) bool {
		_, ok, _ := store.GetByKey(podRef)
		return ok
	}
}

// stopPods stops the pod informer and lets its cache go.
func (r *Reclaimer) stopPods() {
	if r.pods != nil {
		r.pods.stop()
		r.pods = nil
	}
}
