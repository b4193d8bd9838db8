// Package lbannounce answers on the LAN for the addresses of Services of
// type LoadBalancer (cnibox-agent --lb-announce, docs/loadbalancer.md):
// for each address a Service holds (status.loadBalancer.ingress, which
// agent/lbipam writes) that lies in a LoadBalancerIPPool, one node at a
// time holds it on its uplink, so that its kernel answers ARP for it, and
// announces it with a gratuitous ARP when it takes it over. The Services
// proxy (agent/services) DNATs what arrives to the Service's endpoints.
//
// The node is chosen among those the pool's spec.announce.nodeSelector
// selects whose uplink network contains the address and, when the
// Service's externalTrafficPolicy is Local, which run a ready endpoint of
// it (plan.go: plain data in and out). The election and the fence are the
// egress gateway's (agent/addrhold): a Lease per address
// (cnibox-lb-<address> in the namespace Config.Namespace), the address on
// the uplink with a valid lifetime the kernel enforces, refreshed only
// while the Lease is fresh: never two announcers, and a dead announcer's
// address moves about 2 s after its last renewal.
//
// controller.go runs the informers (the pools' and the Leases'; Services,
// EndpointSlices and nodes are the agent's informer cache's) and the loop;
// record.go writes what `cnibox inspect lb` shows.
package lbannounce
