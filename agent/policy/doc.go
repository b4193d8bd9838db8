// Package policy is cnibox-agent's NetworkPolicy engine without the kernel:
// it resolves networking.k8s.io/v1 NetworkPolicies and the
// policy.networking.k8s.io/v1alpha2 ClusterNetworkPolicies of
// sigs.k8s.io/network-policy-api, with the pods and namespaces they select,
// to the plain model of one node that internal/policymodel defines (per
// direction three tiers, each policy's rules as clauses over address sets
// and port ranges, and the sets' elements). The nftables side turns the
// model into sets, verdict maps and chains; a pod that comes, goes or
// changes its labels changes set elements only (Engine's Delta), never
// rules.
//
// Resolve is pure; Engine keeps the inputs and indexes and returns the
// Delta of each change. The watcher (watch.go, not in the etcd-only build)
// feeds an Engine from the API server's informers. docs/policy.md states
// the semantics.
package policy
