package bridge

import (
	"github.com/cnibox/cnibox/netops"
)

// removeLeftover handles an ADD that finds CNI_IFNAME already in the pod. If
// that link is the peer of the attachment's own host veth hostName (derived
// from the container ID and ifname), an earlier ADD of this very attachment
// died before answering (killed, node crash) and the runtime, which never got
// a result, is trying again: the veth pair and its MAC spoofing check are
// deleted so that the ADD starts afresh, and removeLeftover reports true. Any
// other link is not ours to touch: it reports false and ADD fails with
// CodeIfaceExists.
func removeLeftover(pod *netops.Handle, l netops.Link, hostName string) bool {
	if l.Kind != "veth" {
		return false
	}
	host, err := netops.Open("")
	if err != nil {
		return false
	}
	defer host.Close()
	hv, err := host.LinkByName(hostName)
	if err != nil || hv.Kind != "veth" || hv.PeerIndex != l.Index || l.PeerIndex != hv.Index {
		return false
	}
	if err := host.DeleteMacSpoofCheck(hv.Name); err != nil {
		return false
	}
	return host.DeleteLink(hv.Name) == nil
}
