// Package clusteripam is cnibox-agent's cluster IPAM, the server side of the
// whereabouts role: it keeps whereabouts' pools (IPPool,
// OverlappingRangeIPReservation, NodeSlicePool, with whereabouts v0.9.4's
// names and allocation keys: internal/wbpool) in the Kubernetes API, or in
// etcd for hosts without Kubernetes, and answers the role's ipam-* calls
// on the agent's socket (internal/agentapi).
//
// Every write is optimistic: a pool is read, changed and written back on
// the version it was read at (resourceVersion, an etcd mod revision), and
// a conflict reads it again, so cnibox agents and whereabouts' own binary
// can share a pool without ever handing out one address twice. Releases
// that cannot be written (API unreachable) are queued in the data
// directory and written later; DEL never fails for them.
//
// It links client-go (kube.go) and the etcd client (etcd.go): only
// cmd/cnibox-agent imports it.
package clusteripam
