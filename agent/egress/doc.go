// Package egress serves EgressGateway (cnibox.io/v1alpha1): the pods a
// gateway selects leave the cluster from one of its egress addresses,
// whichever node they run on, and the address moves to another eligible
// node when its holder dies (docs/egress.md).
//
// The pieces, each in its own file:
//
//   - api.go: the kind as the API serves it (the CRD is
//     deploy/kubernetes/egressgateway-crd.yaml).
//   - plan.go: what one node must program, from what the informers hold:
//     which pods use which address, which addresses this node may hold,
//     its nftables rules (netops/nft EgressSpec) and routes to the holders
//     (netops EgressRoute). Plain data in, plain data out.
//   - the election of one address on its coordination Lease (take, renew,
//     keep, release) and the fence (the address on the uplink only while
//     held, with a lifetime the kernel enforces) are agent/addrhold's,
//     shared with the LoadBalancer announcer; lease.go names the Leases.
//   - controller.go, loop.go and kernel.go: the informers (the gateways' and the
//     Leases'; pods, namespaces and nodes are the agent's informer cache's,
//     agent/cluster), the Lease calls, the kernel, the status.
//
// Exactly one node holds an address at a time. A holder keeps it only
// while its last renewal is younger than the Lease's duration less a
// margin, measured from when it sent that renewal (the API may have
// accepted it any time after), and adds it with a valid lifetime the
// kernel enforces, refreshed only while that lifetime ends before any
// other node could take the Lease: a holder whose agent is killed, or cut
// off from the API, loses the address before another node may take it.
// Another node takes the Lease when its record has not changed for the
// whole duration of that node's own clock (as client-go's leader election
// measures it), so no two clocks are compared.
package egress
