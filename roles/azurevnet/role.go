package azurevnet

import (
	"github.com/cnibox/cnibox/roles/bridge"
)

// Bridge is azure-vnet's bridge when the config names none.
const Bridge = "azure0"

// Role is azure-vnet: the bridge plugin with bridge azure0 and host veths
// azv<hash>, plus the node's NIC (found by the pod subnet, or "master")
// enslaved to the bridge with its addresses and routes, and nftables rules
// that make the fabric see only the NIC's MAC, as Azure's ebtables rules do.
var Role = bridge.NewWithHooks("azure-vnet",
	"azure-vnet connects pods to the VNet like Azure CNI in bridge mode (\"mode\": \"bridge\"): a veth pair per pod on bridge "+
		"\"bridge\" (default azure0), addresses from the ipam section (azure-vnet-ipam hands out the NIC's secondary IPs). "+
		"The node's NIC (the interface with an address in the pod's subnet, or \"master\") is enslaved to the bridge once, "+
		"its addresses and routes moved to the bridge; nftables bridge rules rewrite MACs so the fabric only sees the NIC's.",
	defaults, hooks)

// defaults are the bridge fields azure-vnet sets when the config does not.
var defaults = bridge.Conf{Bridge: Bridge}

// hooks are azure-vnet's steps in the bridge verbs.
var hooks = &bridge.Hooks{VethPrefix: "azv", Parse: parse, Attach: add, Detach: del, GC: gc}
