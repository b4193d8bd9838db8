// Package azurevnet is the "azure-vnet" main plugin, a drop-in for Azure
// CNI in its two Linux modes. Transparent mode (transparent.go, what AKS
// ships): a veth per pod, no bridge, the host end with proxy ARP and the
// node's route to each pod address, the pod's default route through the
// virtual gateway 169.254.1.1. Bridge mode (the default; fabric.go): the
// bridge role (its verbs with declared hooks, bridge.Verbs) with bridge
// azure0 and host veths azv<hash>, plus the node's NIC enslaved to the
// bridge and nftables rules that make the fabric see only the NIC's MAC.
package azurevnet
