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
// in one batch, applied whole or not at all.
//
// The core (core.go, core_dump.go) is the one lifecycle the tables share:
// a table states what it wants as a tableSpec (the table; its chains,
// base chains with their hook, type and priority, each with its rules; its
// sets and maps with their elements; its flowtables), and reconcile dumps
// what the kernel holds of it and commits the difference in one
// transaction: what is missing is added, a chain whose rules differ is
// flushed and refilled in that transaction, a set's missing elements are
// added and its extra ones deleted, and in a table the spec owns whole
// what it does not name is deleted. Nothing differs, nothing is sent. The
// elements pods add and delete one at a time (the masquerade's, the
// fabric's, the source check's) are not a spec's: their sets are kept,
// made when missing and never emptied, and the per-pod element messages
// (with timeouts, DESTROYSETELEM) stay raw on a txn. Each table is a
// small spec builder of its own (egressTable, fastPathTable, dnsTable,
// fabricTable, masqTable, ...); what a table learns about the kernel on a
// connection lives in a state type of its own (stateOf), not on the
// Handle. Tables on the core: egress, the fast path, DNS, the overlay's
// masquerade and forward rules, the bridge masquerade, the fabric, the
// via-host table, the MAC spoofing check, the source address check, the
// firewall's own chains. Not yet: the port mappings' schema (a raw batch
// that carries the first elements with it), the firewall's maps (raw: mark
// data) and its rules in iptables' chains (placed at the head, or after
// the leading jumps), and the policy tables (policy*.go, mnp.go, their own
// incremental renderer).
//
// Mutating functions are
// idempotent like netops': Ensure* leaves the state as asked, Delete*
// succeeds when the object is already gone. Errors wrap netops' sentinels
// (ErrNotFound, ErrExists).
//
// # Tests without root: the fake kernel
//
// [OpenDial] opens a Handle whose connection talks to an nltest.Func
// instead of a netlink socket; netops/nft/nftfake's Kernel.Dial is one: an
// in-memory nftables that applies batches whole or not at all, assigns
// handles, keeps elements' timeouts on a clock the test advances and
// answers with the kernel's errors (ENOENT, EEXIST, EBUSY, EINVAL) in the
// kernel's encoding, so google/nftables' reads and this package's raw
// messages (single gets, DESTROYSETELEM, element timeouts) both work on
// it, and refuses by name what it does not model. A table's test that
// checks what is written (rules, chains, sets, elements, generations, a
// repair after tampering) runs on it as any user, and on the kernel too as
// root (netops/internal/labtest.OnNFT, onKernels in this package's tests);
// a test of the packets a table judges stays on the kernel. nftfake's
// TestDifferential (root) sends the same batches, failures included, to
// the kernel and the fake and compares every error and dump. Product
// binaries do not link nftfake (TestLeanBinary).
package nft
