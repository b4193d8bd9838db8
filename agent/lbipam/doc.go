// Package lbipam hands out the addresses of Services of type LoadBalancer
// from LoadBalancerIPPools (cnibox.io/v1alpha1, the CRD
// deploy/kubernetes/loadbalancerippool-crd.yaml): one agent of the
// cluster, elected on a coordination Lease as the cluster IPAM's reclaim
// is, writes status.loadBalancer.ingress of every Service whose
// spec.loadBalancerClass is unset or cnibox's (docs/loadbalancer.md).
//
// The pieces, each in its own file:
//
//   - pool.go: a pool as the allocator reads it (its blocks, selector,
//     flags), from the API object, and the blocks it must refuse.
//   - plan.go: the allocation itself, plain data in and out: from the
//     pools and every Service (what each asks for and what its status
//     holds) the addresses each Service should hold, and why a Service
//     gets none. It keeps no state of its own: the allocations are the
//     Services' status, so a controller that starts (or takes over from
//     one that died) rebuilds them from the Services before it hands out
//     anything.
//   - api.go, controller.go, sync.go, fresh.go, lease.go, events.go,
//     metrics.go: the kind, the informer of the pools and the reading of
//     the Services and nodes from the agent's informer cache
//     (agent/cluster, which keeps ServiceView of each Service), the
//     list of the Services at each takeover, the Lease, the status
//     writes, the Events and the metrics (they link client-go: tag
//     !nokube).
//
// No address is held by two Services that may not share it: the plan
// keeps, of two such Services, the older's claim (creation time, then
// name) and moves the other; the leader writes only while its Lease is
// fresh by its own clock, and another agent takes the Lease only once its
// record went unchanged for the Lease's whole duration by that agent's
// clock, then lists the Services again before it plans.
package lbipam
