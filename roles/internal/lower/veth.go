package lower

import (
	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
)

// nodeNetns is the node's network namespace as the plugin sees it: the
// one it runs in.
const nodeNetns = "/proc/self/ns/net"

// vethMaster refuses, with linkInContainer, a master in the pod that is a
// veth whose peer is in the node's namespace: the pod's eth0 (its peer the
// node's bridge or ptp port), or another network's veth. A macvlan,
// ipvlan or vlan on it sends its frames into the node as the pod's own,
// with the addresses and (passthru) the MAC the config chose (issue 48).
// A veth whose peer is in a third namespace (a link a trusted config made
// to a LAN namespace) is left alone. "allowVethMaster": true is the opt-in
// for a pod meant to route for others, which a NetworkAttachmentDefinition
// of an untrusted namespace may not set (agent/podapi's allowlist). Only
// ADD checks: an attachment made before is still checked and deleted.
func vethMaster(pod *netops.Handle, c *Conf) error {
	if !c.LinkInContainer || c.AllowVethMaster {
		return nil
	}
	m, err := pod.LinkByName(c.Master)
	if err != nil || m.Kind != "veth" {
		return nil // resolveMaster named a missing master already
	}
	peer, err := pod.PeerNetnsID(c.Master)
	if err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	if peer < 0 {
		return nil // both ends in the pod
	}
	node, err := pod.NetnsID(nodeNetns)
	if err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	if node != peer {
		return nil
	}
	return cniplug.ConfError("master", "%q is a veth whose peer is in the node's namespace (the pod's way into the node): a device on it sends into the node as the pod, "+
		"with addresses and a MAC of its own: put the device on an interface that stays in the pod, or, for a pod meant to route for others, set \"allowVethMaster\": true "+
		"(which a NetworkAttachmentDefinition of a namespace cnibox-agent does not trust may not)", c.Master)
}
