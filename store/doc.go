// Package store is cnibox's node state: one bbolt file per node
// (DefaultDir/FileName unless a config's dataDir or $CNIBOX_DATA_DIR says
// otherwise). It is the only package that imports bbolt, and it exposes
// domain operations, never buckets: endpoint records (what a role set up for a
// container, for the CLI) and the IPAM reservations of each network.
//
// Every operation is one transaction. A CNI call opens the store, runs one
// transaction and closes it again; it never holds the store across an exec.
// Opening waits for the file lock at most the store timeout (10s, or
// $CNIBOX_STORE_TIMEOUT); past it the error wraps ErrBusy, which carries CNI
// error code 11 ("try again later").
//
// Layout (bucket names are the constants in layout.go):
//
//	endpoints/  network \x00 containerID \x00 ifname -> Endpoint as JSON
//	ipam/<network>/
//	  addr4, addr6    address bytes (4 or 16) -> Reservation (binary, codec.go)
//	  runs4, runs6    first address of a run of reserved addresses -> its last
//	  owner           containerID \x00 ifname \x00 address bytes -> empty
//	  cursor          range-set id -> address bytes (round-robin position)
//	  sticky          "namespace/pod" -> the pod's last addresses
//	  <bucket>        a role's own values kept beside the reservations (kept.go)
//
// Other records have top-level buckets of their own: the store's (overlay.go,
// clusteripam.go, egress.go, policy.go) and the kinds of record the roles
// declare (kinds.go), which the store keeps without naming them.
//
// Address keys are the address bytes, so a range scan is a cursor seek. The
// owner index makes every lookup by owner a prefix seek, and the run index
// makes "the first free address at or after A" one seek, however many
// addresses are reserved: the cost of an ADD or DEL does not grow with the
// number of reservations.
package store
