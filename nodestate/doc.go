// Package nodestate reads what a node holds for its pods (the store's
// records and reservations, libcni's cache, links, masquerade entries and
// port mappings in the kernel), decides what of it is left over from pods
// that are gone, removes it, and finds the attachments on the node when the
// store has to be rebuilt. `cnibox gc` removes what Find returns, `cnibox
// doctor` reports it, and `cnibox store rebuild` records what Discover finds.
//
// A leftover ("orphan") is decided by these rules, from the evidence the node
// has (Find applies rules 1 to 4, recordOrphans rules 5 to 7):
//
//  1. An endpoint record is stale when
//     a. its netns is gone (the path is no longer a network namespace),
//     b. it was written before the last reboot (its boot ID differs: no pod
//     survives a reboot), or
//     c. its ADD never completed (View.unfinishedADD): the runtime's libcni
//     cache was read and holds entries, none of the record's container (in
//     any network), no delegate record names the container, and the record
//     is older than AddGrace (10 minutes: an ADD in flight has no cache entry
//     yet, libcni writes it after the last plugin). A failed ADD whose DEL
//     stopped at a plugin before this one (libcni's DelNetworkList stops at
//     the first failing DEL: a plugin that does not speak the list's
//     cniVersion fails both) leaves exactly that, in a netns the runtime
//     may keep. Records of store rebuild (live pods found without a cache
//     entry) are not judged by it.
//     Its host veth, masquerade entries, reservations and the record itself
//     go.
//  2. A reservation with no endpoint record of its owner (network, container,
//     ifname) is stale only with positive evidence that the owner is gone,
//     because host-local used by another main plugin (or an ADD still in
//     flight) reserves without an endpoint record:
//     a. it was made before the last reboot (its boot ID differs), or
//     b. the runtime's libcni cache records the attachment with a netns
//     that is gone, or
//     c. rule 1c's evidence, for the reservation's container and time.
//     Otherwise it is kept.
//  3. A host veth named like ours (cbx, or azure-vnet's azv, + 12 hex
//     digits) is stale when no live endpoint record names it and no kept
//     reservation or live cached attachment hashes to its name (an ADD in
//     flight has reserved before it creates the veth, and writes the record
//     last).
//  4. A masquerade map entry is stale when no live endpoint record and no
//     kept reservation holds its pod address.
//  5. A portmap, tuning, bandwidth or delegate record is stale only with
//     positive evidence that its attachment is gone, because these roles
//     also run after main plugins that are not cnibox's (no endpoint
//     record), and flannel and multi record before their delegate's ADD:
//     a. it was written before the last reboot;
//     b. the netns it recorded (tuning, delegate) is gone;
//     c. the endpoint record of the same attachment is stale (rule 1);
//     d. it has no endpoint record and the runtime's libcni cache says the
//     attachment's netns is gone;
//     e. another record of the same container (an endpoint of any network,
//     a cache entry, a tuning or delegate record) names a netns that is
//     gone, or is from before the last reboot: a container has one netns.
//     A stale portmap record goes with its elements in table inet
//     cnibox-portmap, a bandwidth record with its ifb device; tuning
//     restores nothing (the pod is gone) and delegate records are dropped
//     (the delegates' own leftovers are covered by rules 1 to 4).
//     The kinds, and what goes with each, are the roles' declarations
//     (cniplug.Leftovers: RecordKind.Witness marks the kinds whose netns
//     speaks for the container in 5e, RecordKind.Meta the meta roles'
//     records of 1c); nodestate names none of them.
//  6. Elements of table inet cnibox-portmap whose owner has no portmap
//     record are stale when rule 5 finds their attachment gone, or when
//     nothing on the node accounts for the owner: no live endpoint record of
//     the attachment and no record, cache entry or endpoint of its container
//     with a live netns. Remove reads the records again right before
//     deleting them, so an ADD that added its elements but has not written
//     its record yet loses nothing.
//  7. An ifb device named like the bandwidth role's (cbw + 12 hex digits)
//     that no bandwidth record names is stale: the role writes its record
//     before it creates the ifb, and deletes the ifb before the record.
//
// Remove deletes in an order that lets a rerun finish what a failure left:
// what the roles made in the kernel besides their records (their Remove
// hooks: port mappings, ifbs), masquerade entries, veths, then the store
// (the roles' records, reservations, endpoint records).
package nodestate
