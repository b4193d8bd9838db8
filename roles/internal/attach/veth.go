package attach

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/netip"
	"strings"

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
	return VethName(VethPrefix, containerID, ifname)
}

// VethPrefix starts the name of every host veth of HostVethName.
const VethPrefix = "cbx"

// VethName is the host end name of a veth attachment with prefix (three
// characters, so the name stays within 15): prefix + 12 hex digits of
// sha256(containerID, ifname).
func VethName(prefix, containerID, ifname string) string {
	sum := sha256.Sum256([]byte(containerID + "\x00" + ifname))
	return prefix + hex.EncodeToString(sum[:6])
}

// IsVethName reports whether a link name has the shape of VethName's names
// with prefix.
func IsVethName(prefix, name string) bool {
	return len(name) == len(prefix)+12 && strings.HasPrefix(name, prefix)
}

// RemoveLeftoverVeth handles an ADD that finds CNI_IFNAME already in the pod.
// If that link is the peer of the attachment's own host veth hostName, an
// earlier ADD of this very attachment died before answering and the runtime
// is trying again: the pair is deleted so the ADD starts afresh, and it
// reports true. Any other link is not ours: it reports false.
func RemoveLeftoverVeth(host *netops.Handle, l netops.Link, hostName string) bool {
	return RemoveLeftoverVethWith(host, l, hostName, nil)
}

// RemoveLeftoverVethWith is RemoveLeftoverVeth with a step of the role's own
// (optional) that removes what it keeps on the host end (such as a MAC
// spoofing check: (*netops.Handle).DeleteMacSpoofCheck) before the pair goes; when that fails, the pair stays and
// it reports false.
func RemoveLeftoverVethWith(host *netops.Handle, l netops.Link, hostName string, before func(host *netops.Handle, hostName string) error) bool {
	if l.Kind != "veth" {
		return false
	}
	hv, err := host.LinkByName(hostName)
	if err != nil || hv.Kind != "veth" || hv.PeerIndex != l.Index || l.PeerIndex != hv.Index {
		return false
	}
	if before != nil && before(host, hv.Name) != nil {
		return false
	}
	return host.DeleteLink(hv.Name) == nil
}

// FreeIfName makes CNI_IFNAME free in the pod for the ADD of a veth
// attachment with host end hostName: a leftover pair of this very
// attachment goes (RemoveLeftoverVethWith, with before), any other link of
// that name is CodeIfaceExists.
func FreeIfName(pod, host *netops.Handle, a *cniplug.Args, hostName string, before func(host *netops.Handle, hostName string) error) error {
	if l, err := pod.LinkByName(a.IfName); err == nil && !RemoveLeftoverVethWith(host, l, hostName, before) {
		return cniplug.Errorf(cniplug.CodeIfaceExists, "interface %q already exists in the pod namespace %s: pick another CNI_IFNAME or DEL the attachment that made it", a.IfName, a.Netns)
	}
	return nil
}

// CreateVeth makes the veth pair o describes (EnsureVeth) and pushes the
// delete of its host end on undo. A pod end name that is taken is
// CodeIfaceExists.
func CreateVeth(host *netops.Handle, undo *cniplug.Undo, o netops.VethOpts) (hv, pv netops.Link, err error) {
	hv, pv, err = host.EnsureVeth(o)
	if errors.Is(err, netops.ErrExists) {
		return hv, pv, cniplug.Errorf(cniplug.CodeIfaceExists, "create veth %s/%s: %w", o.HostName, o.PeerName, err)
	}
	if err != nil {
		return hv, pv, cniplug.Errorf(types.ErrIOFailure, "create veth %s/%s: %w", o.HostName, o.PeerName, err)
	}
	undo.Push(func() { _ = host.DeleteLink(o.HostName) })
	return hv, pv, nil
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

// VethIPv6 is the IPv6 of the ends of a veth attachment whose pod has the
// addresses pod (netops.VethIPv6): without an IPv6 address, none at all
// (the kernel's link-local address would reach other pods and the node
// around every policy: issue 60); with one, the pod's own link-local
// address, which the source address check binds to its port (SourceCheck).
func VethIPv6(pod []netip.Prefix) netops.VethIPv6 {
	for _, p := range pod {
		if p.Addr().Is6() && !p.Addr().Is4In6() {
			return netops.VethIPv6LinkLocal
		}
	}
	return netops.VethIPv6None
}
