//go:build !nokube

package clusteripam

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/cnibox/cnibox/agent/kubeapi"
)

// The reclaim asks one question of the cluster's pods: does pod
// "namespace/name" exist? The Lease's holder answers it from a reflector of
// the pods' metadata (PartialObjectMetadata in protobuf, listed in pages,
// kubeapi.MetaListWatch) into a store that keeps each pod's key and nothing
// of the object (kubeapi.KeySet). It lists once when the agent takes the Lease,
// then follows the watch, and is stopped when the Lease moves on, so the
// other agents hold nothing. Before, every scan (15 s) listed every pod's
// metadata, managed fields included, in one unpaged JSON response.

// podsGVR is the resource the pod reflector reads.
var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// podCache is the running pod reflector and its store.
type podCache struct {
	names *kubeapi.KeySet
	stop  context.CancelFunc
}

// podsSynced starts the pod reflector if it is not running and returns
// whether a pod exists; nil when the pods have not been listed within an
// interval (the scan waits for the next tick).
func (r *Reclaimer) podsSynced(ctx context.Context) func(string) bool {
	if r.pods == nil {
		ctx, stop := context.WithCancel(ctx)
		r.pods = &podCache{names: kubeapi.RunKeySet(ctx, r.meta, podsGVR, "cluster IPAM reclaim: pods"), stop: stop}
	}
	names := r.pods.names
	if !names.Synced() {
		wait, cancel := context.WithTimeout(ctx, r.Interval)
		defer cancel()
		if !cache.WaitForCacheSync(wait.Done(), names.Synced) {
			return nil
		}
	}
	return names.Has
}

// stopPods stops the pod reflector and lets its store go.
func (r *Reclaimer) stopPods() {
	if r.pods != nil {
		r.pods.stop()
		r.pods = nil
	}
}
