// Package azurevnet is the "azure-vnet" main plugin, a drop-in for Azure CNI
// in bridge mode: the bridge role (through its declared hooks,
// bridge.NewWithHooks) with bridge azure0 and host veths azv<hash>, plus the
// node's NIC enslaved to the bridge and nftables rules that make the fabric
// see only the NIC's MAC.
package azurevnet
