// Package vxlan is the "vxlan" role: the pod side of cnibox's VXLAN overlay.
// It attaches the pod to the node bridge with an address from the subnet
// that cnibox-agent leased for this node, through the flannel role's
// delegate path (bridge + host-local, in process, recorded in the store and
// replayed on DEL) rather than a copy of it.
//
// The agent's logic and its lease backends live in subpackages (agent,
// lease, lease/etcdlease, lease/kubelease) that only cmd/cnibox-agent
// imports; this package reads what the agent mirrored into the store and
// never links an etcd or Kubernetes client.
package vxlan
