// Package netops is the only package of cnibox that talks to the kernel's
// networking stack: links, addresses, routes, neighbours, sysctls and tc,
// and (in its package netops/nft, which a Handle lends through NFT) the
// nftables tables cnibox owns.
//
// Every operation goes through a [Handle] bound to one network namespace.
// Netlink requests use sockets opened inside that namespace, so the calling
// thread never changes namespace, except for sysctl writes under /proc/sys,
// which the kernel resolves against the namespace of the calling thread.
//
// Mutating functions are idempotent: Ensure* leaves the state as asked and
// succeeds when it already is; Delete* succeeds when the object is already
// gone. Errors wrap [ErrNotFound] and [ErrExists] where the kernel said so,
// so callers match them with errors.Is.
//
// The package does no work at init time: sockets are opened by [Open], and
// the ones that only some calls need (a raw rtnetlink socket, the nftables
// connection) are opened on first use.
package netops
