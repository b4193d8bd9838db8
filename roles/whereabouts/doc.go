// Package whereabouts is the whereabouts IPAM role: a drop-in for
// k8snetworkplumbingwg/whereabouts v0.9.4 that takes its "ipam" section as
// it is and keeps its pools in whereabouts' own CRDs (IPPool,
// OverlappingRangeIPReservation, NodeSlicePool), with its object names and
// allocation keys (internal/wbpool), so that whereabouts and cnibox can run
// side by side in one cluster. The CNI process reads no kubeconfig: it asks
// the node agent (cnibox-agent --cluster-ipam) over the agent's unix socket
// (internal/agentapi), which allocates with the API server's optimistic
// concurrency (agent/clusteripam), or on etcd for hosts without Kubernetes.
package whereabouts
