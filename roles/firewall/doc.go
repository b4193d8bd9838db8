// Package firewall is the firewall role: a chained plugin that lets the
// pod's addresses through the node's forward path (also where iptables-nft's
// FORWARD policy is DROP, as Docker leaves it), keeps the operators' admin
// chain (CNI-ADMIN) in front, and applies the ingressPolicy (same-bridge,
// isolated) with nftables over netlink.
package firewall
