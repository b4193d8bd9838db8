// Package vrf is the vrf role, a drop-in for the reference plugins' vrf:
// chained after a main plugin, it puts CNI_IFNAME into a VRF device of the
// pod (created when missing) with its routes moved into the VRF's table, and
// deletes the VRF when DEL takes its last interface out.
package vrf
