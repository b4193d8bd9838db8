// Package services is the agent's side of the Services proxy
// (--service-proxy, docs/services.md): it reads Services and
// EndpointSlices (discovery.k8s.io/v1) from the agent's one informer
// cache (agent/cluster, where they are two kinds more, slimmed at the
// informer's transform like the pods, namespaces and nodes), resolves
// them into the proxy's vocabulary (internal/svcmodel) exactly as
// kube-proxy's change trackers and CategorizeEndpoints do (resolve.go,
// topology.go), and hands each snapshot to the services table behind the
// Table interface (netops/nft's Services), which only writes what it is
// given.
//
// The pieces:
//   - State (state.go): what the informers saw, each Service resolved
//     again only when it, one of its slices or the node changed;
//   - Syncer (syncer.go): the loop that coalesces changes into one Apply,
//     resyncs the whole table every --service-resync, backs off and
//     resyncs after a failure, and keeps kube-proxy's health (/healthz,
//     /livez: proxyhealth.go) and sync metrics (metrics.go, kube-proxy's
//     names);
//   - HealthChecks (healthcheck.go): the health check node ports of
//     LoadBalancer Services with externalTrafficPolicy Local;
//   - NodePortAddresses (nodeports.go): --nodeport-addresses, kube-proxy's
//     meaning;
//   - Watch (watch.go, not in the nokube build): the cache's handlers
//     feeding the State, and the Syncer started once they hold their
//     first lists.
package services
