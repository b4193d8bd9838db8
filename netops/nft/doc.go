// Package nft is the nftables side of netops: every table cnibox owns in a
// network namespace (the masquerade maps and the bridge fabric of table
// cnibox, the port mappings, the firewall role's maps, the overlay's
// masquerade and forward rules, the via-host rules) and the one lasting
// nftables connection that reaches them.
//
// A [Handle] is bound to one namespace. netops.Handle lends its own
// (netops.Handle.NFT), so a DEL that removes a pod's elements and then its
// veth keeps one nftables socket open across the veth delete and closes it
// last, when the kernel's deferred cleanup is done; a caller that needs no
// links opens one with [Open].
//
// Every change is one transaction (txn): what it queues reaches the kernel
// in one batch, applied whole or not at all. Mutating functions are
// idempotent like netops': Ensure* leaves the state as asked, Delete*
// succeeds when the object is already gone. Errors wrap netops' sentinels
// (ErrNotFound, ErrExists).
package nft
