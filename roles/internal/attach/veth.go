package attach

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
)

// HostVethName is the host end name of a veth attachment: "cbx" + 12 hex
// digits of sha256(containerID, ifname), the bridge role's scheme, so that
// `cnibox gc`, `doctor` and `inspect` (which know it as
// bridge.HostVethName) know the veth, and DEL and GC need no lookup. A test
// holds the two equal.
func HostVethName(containerID, ifname string) string {
	sum := sha256.Sum256([]byte(containerID + "\x00" + ifname))
	return "cbx" + hex.EncodeToString(sum[:6])
}

// RemoveLeftoverVeth handles an ADD that finds CNI_IFNAME already in the pod.
// If that link is the peer of the attachment's own host veth hostName, an
// earlier ADD of this very attachment died before answering and the runtime
// is trying again: the pair is deleted so the ADD starts afresh, and it
// reports true. Any other link is not ours: it reports false.
func RemoveLeftoverVeth(host *netops.Handle, l netops.Link, hostName string) bool {
	if l.Kind != "veth" {
		return false
	}
	hv, err := host.LinkByName(hostName)
	if err != nil || hv.Kind != "veth" || hv.PeerIndex != l.Index || l.PeerIndex != hv.Index {
		return false
	}
	return host.DeleteLink(hv.Name) == nil
}

// DeleteVeth deletes the host end hostName (and with it the pod end). If the
// host end is not there but the pod still has CNI_IFNAME as a veth, that
// goes. A pod namespace that is gone took its interfaces with it.
func DeleteVeth(host *netops.Handle, hostName string, a *cniplug.Args) error {
	if _, err := host.LinkByName(hostName); err == nil {
		if err := host.DeleteLink(hostName); err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "delete veth %s: %w", hostName, err)
		}
		return nil
	}
	return DeletePodLink(a, "veth")
}

// DeletePodLink deletes CNI_IFNAME in the pod when it is a link of kind.
// It succeeds when the namespace or the link is gone (or is something else,
// which is not ours).
func DeletePodLink(a *cniplug.Args, kind string) error {
	if a.Netns == "" {
		return nil
	}
	pod, err := netops.Open(a.Netns)
	if err != nil {
		return nil // the namespace is gone, and its interfaces with it
	}
	defer pod.Close()
	l, err := pod.LinkByName(a.IfName)
	if errors.Is(err, netops.ErrNotFound) || (err == nil && l.Kind != kind) {
		return nil
	}
	if err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	if err := pod.DeleteLink(a.IfName); err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "delete %s in the pod: %w", a.IfName, err)
	}
	return nil
}
