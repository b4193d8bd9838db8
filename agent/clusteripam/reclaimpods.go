//go:build !nokube

package clusteripam

import (
	"context"

	"k8s.io/client-go/tools/cache"

	"github.com/cnibox/cnibox/agent/cluster"
)

// The reclaim asks one question of the cluster's pods: does pod
// "namespace/name" exist? The Lease's holder answers it from the agent's
// informer cache of pods (agent/cluster, Reclaimer.Pods): it becomes a
// reader of the cache's pods when it takes the Lease and stops being one
// when the Lease moves on, so that an agent whose cache has no other
// reader of the pods (no NetworkPolicy, no MultiNetworkPolicy, no egress)
// lists and holds them only while it leads. Before, every scan (15 s)
// listed every pod's metadata, managed fields included, in one unpaged
// JSON response; then the holder ran a reflector of its own (a set of the
// pods' keys), a second list and watch of the pods where the cache had
// one already.

// podsSynced makes the reclaim a reader of the cache's pods if it is not
// one and returns whether a pod exists; nil when the pods have not been
// listed within an interval (the scan waits for the next tick).
func (r *Reclaimer) podsSynced(ctx context.Context) func(string) bool {
	if r.Pods == nil {
		r.Log.Error("cluster IPAM reclaim: no informer cache of the pods (Reclaimer.Pods): not reclaiming")
		return nil
	}
	if r.pods == nil {
		h, err := r.Pods.Handle(cluster.Pods, cache.ResourceEventHandlerFuncs{})
		if err != nil {
			r.Log.Warn("cluster IPAM reclaim: read the pods", "err", err)
			return nil
		}
		r.pods = h
	}
	if !r.pods.HasSynced() {
		wait, cancel := context.WithTimeout(ctx, r.Interval)
		defer cancel()
		if !cache.WaitForCacheSync(wait.Done(), r.pods.HasSynced) {
			return nil
		}
	}
	return func(key string) bool {
		_, ok := r.Pods.Get(cluster.Pods, key)
		return ok
	}
}

// stopPods stops reading the cache's pods (the cache lets them go when no
// other reader is left).
func (r *Reclaimer) stopPods() {
	if r.pods != nil {
		r.pods.Stop()
		r.pods = nil
	}
}
