package attach

import (
	"context"
	"slices"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
)

// Prev returns the ADD result that CHECK verifies, after the IPAM plugin's
// own CHECK, and the index of the pod's interface in it (CNI_IFNAME in
// CNI_NETNS).
func Prev(ctx context.Context, a *cniplug.Args) (*current.Result, int, error) {
	prev, err := a.RequirePrevResult()
	if err != nil {
		return nil, 0, err
	}
	if t := a.Conf.IPAM.Type; t != "" {
		if err := a.DelegateCheck(ctx, t, a.StdinData); err != nil {
			return nil, 0, err
		}
	}
	for i, ifc := range prev.Interfaces {
		if ifc.Name == a.IfName && ifc.Sandbox == a.Netns {
			return prev, i, nil
		}
	}
	return nil, 0, cniplug.Errorf(types.ErrInvalidNetworkConfig, "prevResult has no interface %q with sandbox %q: CHECK must get the result of this attachment's ADD", a.IfName, a.Netns)
}

// CheckPodLink verifies that the pod's interface exists, is of kind, up, and
// has the MAC the ADD result gave it. It returns the link.
func CheckPodLink(pod *netops.Handle, a *cniplug.Args, kind string, ifc *current.Interface) (netops.SubLink, error) {
	pl, err := pod.SubLinkByName(a.IfName)
	if err != nil {
		return pl, cniplug.Errorf(types.ErrIOFailure, "interface %q in the pod: %w", a.IfName, err)
	}
	if pl.Kind != kind {
		return pl, cniplug.Errorf(types.ErrIOFailure, "interface %q in the pod is a %q device, not a %s", a.IfName, pl.Kind, kind)
	}
	if ifc.Mac != "" && ifc.Mac != pl.MAC.String() {
		return pl, cniplug.Errorf(types.ErrIOFailure, "interface %q in the pod has MAC %s, the ADD result says %s", a.IfName, pl.MAC, ifc.Mac)
	}
	if !pl.Up {
		return pl, cniplug.Errorf(types.ErrIOFailure, "interface %q in the pod is down", a.IfName)
	}
	return pl, nil
}

// CheckPodAddrs verifies that the addresses of prev for interface podIdx
// are on ifname in the pod.
func CheckPodAddrs(pod *netops.Handle, ifname string, prev *current.Result, podIdx int) error {
	have, err := pod.Addrs(ifname)
	if err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	for _, ipc := range prev.IPs {
		if ipc.Interface != nil && *ipc.Interface != podIdx {
			continue
		}
		want := PrefixOf(ipc.Address)
		if !slices.Contains(have, want) {
			return cniplug.Errorf(types.ErrIOFailure, "address %s is missing on %q in the pod (has %v)", want, ifname, have)
		}
	}
	return nil
}

// CheckPodRoutes verifies that the routes of prev are in the pod, out of
// ifname.
func CheckPodRoutes(pod *netops.Handle, ifname string, prev *current.Result) error {
	have, err := pod.Routes(ifname)
	if err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	for _, r := range prev.Routes {
		dst, gw := PrefixOf(r.Dst), AddrOf(r.GW)
		found := slices.ContainsFunc(have, func(h netops.Route) bool {
			return h.Dst == dst.Masked() && (!gw.IsValid() || h.GW == gw)
		})
		if !found {
			return cniplug.Errorf(types.ErrIOFailure, "route %s via %s is missing in the pod", dst, gw)
		}
	}
	return nil
}
