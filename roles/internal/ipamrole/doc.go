// Package ipamrole is what the IPAM roles (host-local, static, cloud IPAM)
// share: decoding the "ipam" section with messages that name the field,
// routes and resolv.conf as configs write them, the result's addresses, and
// the pool of a network in the node's store with its DEL and GC.
package ipamrole
