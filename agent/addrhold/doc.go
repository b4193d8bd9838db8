// Package addrhold elects, for each of a set of addresses, the one node
// that holds it on its uplink, and fences it there: the machinery the
// egress gateway (agent/egress, docs/egress.md) and the LoadBalancer
// announcer (agent/lbannounce, docs/loadbalancer.md) share, so that both
// keep the same bound of never two holders.
//
// The pieces, each in its own file:
//
//   - claim.go: the decisions of one node on one address's coordination
//     Lease (take, renew, keep, release) and the fence's times: until when
//     the node may keep the address on its uplink. Plain data.
//   - lease.go: the Lease writes (client-go's rest, tag !nokube).
//   - election.go: every address's claim, the Leases' reads and writes on
//     their own goroutines, the holders as this node sees them.
//   - fence.go: the kernel side: the address on the uplink with a valid
//     lifetime the kernel enforces, refreshed only while the claim allows,
//     removed at once when the node no longer holds it, and announced on
//     the LAN (gratuitous ARP; unsolicited neighbour advertisement for
//     IPv6, netops/announce) when it may have been gone.
//   - networks.go: the node's uplink networks published in its Node's
//     annotation cluster.EgressNetworksAnnotation (what node may hold what
//     address).
//   - member.go, clients.go: what a controller of one kind of addresses
//     runs besides its plan (Member): the election, the fence, the
//     networks, the metrics, the informers and the loop, and the record
//     of its view for `cnibox inspect`.
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
package addrhold
