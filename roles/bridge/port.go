package bridge

import (
	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/fault"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/roles/internal/attach"
)

// The host end of a pod's veth is a port of the bridge: what ADD sets on it,
// CHECK verifies, DEL and GC delete.

// setupPort sets what the config asks of the host end hostName as a port
// of the bridge: hairpin mode, isolation, VLANs and the MAC spoofing check
// of the pod end pv. The flags need no undo: they go with the veth.
func setupPort(host *netops.Handle, c *Conf, undo *cniplug.Undo, hostName string, pv netops.Link) error {
	if c.HairpinMode {
		if err := host.SetHairpin(hostName, true); err != nil {
			return cniplug.WithCode(types.ErrIOFailure, err)
		}
	}
	if c.PortIsolation {
		if err := host.SetPortIsolated(hostName, true); err != nil {
			return cniplug.WithCode(types.ErrIOFailure, err)
		}
	}
	if c.Vlan != 0 || len(c.vlans) > 0 {
		if err := host.SetPortVlans(hostName, netops.PortVlanOpts{Access: c.Vlan, Trunk: c.vlans, PreserveDefault: c.PreserveDefaultVlan}); err != nil {
			return cniplug.WithCode(types.ErrIOFailure, err)
		}
	}
	if c.MacSpoofChk {
		if err := host.NFT().EnsureMacSpoofCheck(hostName, pv.MAC); err != nil {
			return cniplug.WithCode(types.ErrIOFailure, err)
		}
		undo.Push(func() { _ = host.NFT().DeleteMacSpoofCheck(hostName) })
		fault.Point("bridge/add/after-macspoof")
	}
	return nil
}

// checkPort verifies the host end hostName: a port of the bridge, up, and
// isolated with portIsolation.
func checkPort(host *netops.Handle, c *Conf, hostName string) error {
	br, err := host.LinkByName(c.Bridge)
	if err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "bridge %q: %w", c.Bridge, err)
	}
	hl, err := host.LinkByName(hostName)
	if err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "host end %q of the pod's veth: %w", hostName, err)
	}
	if hl.MasterIndex != br.Index {
		return cniplug.Errorf(types.ErrIOFailure, "host end %q is not a port of bridge %q", hostName, c.Bridge)
	}
	if !hl.Up {
		return cniplug.Errorf(types.ErrIOFailure, "host end %q is down", hostName)
	}
	if c.PortIsolation {
		iso, err := host.PortIsolated(hostName)
		if err != nil {
			return cniplug.WithCode(types.ErrIOFailure, err)
		}
		if !iso {
			return cniplug.Errorf(types.ErrIOFailure, "host end %q is not an isolated port of bridge %q, and the config sets portIsolation", hostName, c.Bridge)
		}
	}
	return nil
}

// checkPodEnd verifies the pod end ifname of a port left down
// (disableContainerInterface): there, with the MAC mac of the ADD result
// ("": none to compare), up or down.
func checkPodEnd(pod *netops.Handle, ifname, mac string) error {
	l, err := pod.LinkByName(ifname)
	if err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "interface %q in the pod: %w", ifname, err)
	}
	if mac != "" && mac != l.MAC.String() {
		return cniplug.Errorf(types.ErrIOFailure, "interface %q in the pod has MAC %s, the ADD result says %s", ifname, l.MAC, mac)
	}
	return nil
}

// deletePort deletes the host end hostName (and with it the pod end; see
// attach.DeleteVeth) after its MAC spoofing check.
func deletePort(host *netops.Handle, c *Conf, a *cniplug.Args, hostName string) error {
	if c.MacSpoofChk {
		if err := host.NFT().DeleteMacSpoofCheck(hostName); err != nil {
			return cniplug.WithCode(types.ErrIOFailure, err)
		}
		fault.Point("bridge/del/after-macspoof")
	}
	return attach.DeleteVeth(host, hostName, a)
}

// gcVeths deletes our veths on the bridge that belong to no kept attachment.
func gcVeths(host *netops.Handle, bridge string, keep map[string]bool, ours func(string) bool) error {
	br, err := host.LinkByName(bridge)
	if err != nil {
		return nil // no bridge, no ports
	}
	links, err := host.Links()
	if err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	for _, l := range links {
		if l.MasterIndex != br.Index || !ours(l.Name) || keep[l.Name] {
			continue
		}
		if err := host.DeleteLink(l.Name); err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "delete stale veth %s: %w", l.Name, err)
		}
	}
	return nil
}

// gcMacSpoof deletes the MAC spoofing checks of our host veths that are gone
// and not kept (attach.GCPortChecks).
func gcMacSpoof(host *netops.Handle, keep map[string]bool, ours func(string) bool) error {
	ports, err := host.NFT().MacSpoofPorts()
	if err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	return attach.GCPortChecks(host, ports, keep, ours, "mac spoof check", host.NFT().DeleteMacSpoofCheck)
}

// deletePortChecks removes the MAC spoofing check and the source address
// check of the host port hostName (a leftover of this attachment's earlier
// pair, whose addresses may not be this ADD's).
func deletePortChecks(host *netops.Handle, hostName string) error {
	if err := host.NFT().DeleteMacSpoofCheck(hostName); err != nil {
		return err
	}
	return host.NFT().DeleteSourceCheck(nft.SrcCheckBridge, hostName, nil)
}
