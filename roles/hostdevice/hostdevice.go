// Package hostdevice is the "host-device" main plugin: it moves a device of
// the node (named by "device", "hwaddr", "kernelpath", "pciBusID" or the
// runtime's deviceID) into the pod as CNI_IFNAME, with the addresses and
// routes from IPAM, and on DEL moves it back under its own name with the
// addresses, MTU, MAC and up state it had. A device bound to a userspace
// (DPDK) driver has no netdev: only its addresses are handed out.
//
// What the device was is written to the endpoint record before it moves
// (in the same store transaction as its addresses, which also refuses a
// device another attachment holds); its node name also travels with it as
// its alias, as the reference plugin keeps it, so a device the kernel gives
// back to the node when the pod's namespace goes is still found.
package hostdevice

import (
	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/roles/internal/lower"
)

// plugin is the role's type name, which its endpoint records carry.
const plugin = "host-device"

// spec puts the plan on the moved device. It does not announce the
// addresses (the reference does not either).
var spec = lower.Spec{Kind: plugin}

// Role is the "host-device" role.
var Role = &cniplug.Role{
	Name: plugin,
	About: "host-device moves a device of the node (\"device\", \"hwaddr\", \"kernelpath\", \"pciBusID\" or " +
		"runtimeConfig.deviceID) into the pod as CNI_IFNAME with the addresses and routes of the ipam section, " +
		"and on DEL gives it back to the node under its own name with its addresses, MTU, MAC and up state.",
	Verbs: &cniplug.ConfVerbs[*conf]{Parse: parse, Add: add, Check: check, Del: del, GC: gc,
		ParseStatus: cniplug.Unparsed[*conf], Status: attach.Status[*conf]},

	Known: &known,
}
