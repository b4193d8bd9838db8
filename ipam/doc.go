// Package ipam is cnibox's one IP allocator, shared by the host-local role and
// cloud IPAM: ranges and range sets (with the reference host-local plugin's
// defaults and checks), and Allocate, which picks one address per range set
// inside a store.IPAMTx, so the reservations and the round-robin cursors
// change in the caller's single transaction.
//
// Allocation order for one attachment (container ID + ifname):
//
//  1. addresses it already holds in these sets (a retried ADD gets the same);
//  2. requested addresses (CNI_ARGS IP=, args.cni.ips, runtimeConfig.ips);
//  3. with Sticky, the pod's previous addresses while they are free;
//  4. round robin: the first free address after the set's cursor, wrapping
//     across the set's ranges; gateways are never handed out.
//
// Errors carry CNI codes (cniplug.Errorf): 7 for a bad range or request,
// cniplug.CodePoolExhausted when a set has no free address.
package ipam
