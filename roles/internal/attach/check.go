package attach

import (
	"context"
	"slices"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/podns"
)

// CheckOpts are the role's parts of Check.
type CheckOpts struct {
	// Prev finds prevResult and the pod's interface in it: Prev or
	// PrevByName.
	Prev func(context.Context, *cniplug.Args) (*current.Result, int, error)
	// Kind is the kind of the pod's interface; "" accepts any.
	Kind string
	// Pod runs the role's checks in the pod's namespace after those of the
	// interface and its addresses (optional: without it, the routes of
	// prevResult, CheckPodRoutes).
	Pod func(pod *netops.Handle, prev *current.Result) error
	// Node runs the role's checks in the node's namespace (optional).
	Node func(host *netops.Handle, prev *current.Result) error
	// IPMasq checks the masquerade entries of the pod's addresses last.
	IPMasq bool
}

// Check is the CHECK of an attachment with one interface in the pod:
// prevResult after the IPAM plugin's CHECK, the pod's interface, its
// addresses and routes (or o.Pod), then the node's side: o.Node and, with o.IPMasq,
// the masquerade entries.
func Check(ctx context.Context, a *cniplug.Args, o CheckOpts) error {
	prev, podIdx, err := o.Prev(ctx, a)
	if err != nil {
		return err
	}
	if err := checkPod(a, o, prev, podIdx); err != nil {
		return err
	}
	return podns.InHost(func(host *netops.Handle) error {
		if o.Node != nil {
			if err := o.Node(host, prev); err != nil {
				return err
			}
		}
		if o.IPMasq {
			return CheckMasq(host, prev)
		}
		return nil
	})
}

// checkPod is Check's part in the pod's namespace.
func checkPod(a *cniplug.Args, o CheckOpts, prev *current.Result, podIdx int) error {
	pod, err := podns.Open(a.Netns)
	if err != nil {
		return err
	}
	defer pod.Close()
	var ifc *current.Interface
	if podIdx >= 0 {
		ifc = prev.Interfaces[podIdx]
	}
	if _, err := CheckPodLink(pod, a, o.Kind, ifc); err != nil {
		return err
	}
	if err := CheckPodAddrs(pod, a.IfName, prev, podIdx); err != nil {
		return err
	}
	if o.Pod != nil {
		return o.Pod(pod, prev)
	}
	return CheckPodRoutes(pod, a.IfName, prev)
}

// Prev returns the ADD result that CHECK verifies, after the IPAM plugin's
// own CHECK, and the index of the pod's interface in it (CNI_IFNAME in
// CNI_NETNS).
func Prev(ctx context.Context, a *cniplug.Args) (*current.Result, int, error) {
	prev, err := prevChecked(ctx, a)
	if err != nil {
		return nil, 0, err
	}
	for i, ifc := range prev.Interfaces {
		if ifc.Name == a.IfName && ifc.Sandbox == a.Netns {
			return prev, i, nil
		}
	}
	return nil, 0, cniplug.Errorf(types.ErrInvalidNetworkConfig, "prevResult has no interface %q with sandbox %q: CHECK must get the result of this attachment's ADD", a.IfName, a.Netns)
}

// PrevByName is Prev for a role that finds the pod's interface in
// prevResult by name alone, in any sandbox (bridge): the last such
// interface, or -1 when there is none, which is no error (CheckPodAddrs
// then checks the addresses that name no interface).
func PrevByName(ctx context.Context, a *cniplug.Args) (*current.Result, int, error) {
	prev, err := prevChecked(ctx, a)
	if err != nil {
		return nil, 0, err
	}
	idx := -1
	for i, ifc := range prev.Interfaces {
		if ifc.Name == a.IfName && ifc.Sandbox != "" {
			idx = i
		}
	}
	return prev, idx, nil
}

// prevChecked returns the call's prevResult (a CHECK without one is an
// error) after the IPAM plugin's own CHECK.
func prevChecked(ctx context.Context, a *cniplug.Args) (*current.Result, error) {
	prev, err := a.RequirePrevResult()
	if err != nil {
		return nil, err
	}
	if t := a.Conf.IPAM.Type; t != "" {
		if err := a.DelegateCheck(ctx, t, a.StdinData); err != nil {
			return nil, err
		}
	}
	return prev, nil
}

// CheckPodLink verifies that the pod's interface exists, is of kind (any
// kind when kind is ""), up, and has the MAC the ADD result gave it in ifc
// (none to compare when ifc is nil). It returns the link.
func CheckPodLink(pod *netops.Handle, a *cniplug.Args, kind string, ifc *current.Interface) (netops.SubLink, error) {
	pl, err := pod.SubLinkByName(a.IfName)
	if err != nil {
		return pl, cniplug.Errorf(types.ErrIOFailure, "interface %q in the pod: %w", a.IfName, err)
	}
	if kind != "" && pl.Kind != kind {
		return pl, cniplug.Errorf(types.ErrIOFailure, "interface %q in the pod is a %q device, not a %s", a.IfName, pl.Kind, kind)
	}
	if ifc != nil && ifc.Mac != "" && ifc.Mac != pl.MAC.String() {
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
