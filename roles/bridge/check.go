package bridge

import (
	"context"
	"net/netip"
	"slices"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
)

// check verifies the attachment against prevResult: the pod interface, its
// addresses and routes, the host end on the bridge and up, and the masquerade
// entries.
func check(ctx context.Context, a *cniplug.Args, defaults Conf) error {
	c, err := parseConf(a, defaults)
	if err != nil {
		return err
	}
	prev, err := a.RequirePrevResult()
	if err != nil {
		return err
	}
	if t := a.Conf.IPAM.Type; t != "" {
		if err := a.DelegateCheck(ctx, t, a.StdinData); err != nil {
			return err
		}
	}
	pod, err := netops.Open(a.Netns)
	if err != nil {
		return cniplug.Errorf(types.ErrUnknownContainer, "open CNI_NETNS %q: %w", a.Netns, err)
	}
	defer pod.Close()
	pl, err := pod.LinkByName(a.IfName)
	if err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "interface %q in the pod: %w", a.IfName, err)
	}
	podIdx := -1
	for i, ifc := range prev.Interfaces {
		if ifc.Name == a.IfName && ifc.Sandbox != "" {
			podIdx = i
			if ifc.Mac != "" && ifc.Mac != pl.MAC.String() {
				return cniplug.Errorf(types.ErrIOFailure, "interface %q in the pod has MAC %s, the ADD result says %s", a.IfName, pl.MAC, ifc.Mac)
			}
		}
	}
	if !pl.Up {
		return cniplug.Errorf(types.ErrIOFailure, "interface %q in the pod is down", a.IfName)
	}
	if err := checkPodAddrs(pod, a.IfName, prev, podIdx); err != nil {
		return err
	}
	if err := checkPodRoutes(pod, a.IfName, prev); err != nil {
		return err
	}
	host, err := netops.Open("")
	if err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	defer host.Close()
	br, err := host.LinkByName(c.Bridge)
	if err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "bridge %q: %w", c.Bridge, err)
	}
	hostName := c.hostVethName(a.ContainerID, a.IfName)
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
	if c.IPMasq {
		return checkMasq(host, prev)
	}
	return nil
}

func checkPodAddrs(pod *netops.Handle, ifname string, prev *current.Result, podIdx int) error {
	have, err := pod.Addrs(ifname)
	if err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	for _, ipc := range prev.IPs {
		if ipc.Interface != nil && *ipc.Interface != podIdx {
			continue
		}
		want := prefixOf(ipc.Address)
		if !slices.Contains(have, want) {
			return cniplug.Errorf(types.ErrIOFailure, "address %s is missing on %q in the pod (has %v)", want, ifname, have)
		}
	}
	return nil
}

func checkPodRoutes(pod *netops.Handle, ifname string, prev *current.Result) error {
	have, err := pod.Routes(ifname)
	if err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	for _, r := range prev.Routes {
		dst, gw := prefixOf(r.Dst), addrOf(r.GW)
		found := slices.ContainsFunc(have, func(h netops.Route) bool {
			return h.Dst == dst && (!gw.IsValid() || h.GW == gw)
		})
		if !found {
			return cniplug.Errorf(types.ErrIOFailure, "route %s via %s is missing in the pod", dst, gw)
		}
	}
	return nil
}

func checkMasq(host *netops.Handle, prev *current.Result) error {
	entries, err := host.MasqEntries()
	if err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	have := map[netip.Addr]bool{}
	for _, e := range entries {
		have[e.PodIP] = true
	}
	for _, ipc := range prev.IPs {
		if ip := prefixOf(ipc.Address).Addr(); !have[ip] {
			return cniplug.Errorf(types.ErrIOFailure, "masquerade entry for %s is missing (table inet cnibox)", ip)
		}
	}
	return nil
}
