package vrf

import (
	"context"
	"errors"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/chain"
	"github.com/cnibox/cnibox/roles/internal/podns"
)

// Role is the "vrf" role: CNI_IFNAME into a VRF of the pod, chained after a
// main plugin.
var Role = &cniplug.Role{
	Name: "vrf",
	About: "vrf puts CNI_IFNAME into the VRF device 'vrfname' of the pod, creating it (with 'table', or the lowest " +
		"table no VRF of the pod uses) when it is missing, and moves the interface's routes into the VRF's table. " +
		"Several attachments may share one VRF; DEL takes the interface out and deletes the VRF with its last one. " +
		"It runs chained after a main plugin.",
	Verbs: &chain.Verbs[*vrfConf]{Parse: parseVRFConf, Add: vrfAdd, Check: vrfCheck, Del: vrfDel},

	Known: &known,
}

func vrfAdd(_ context.Context, a *cniplug.Args, c *vrfConf, prev *current.Result) (_ types.Result, err error) {
	pod, err := podns.Open(a.Netns)
	if err != nil {
		return nil, err
	}
	defer pod.Close()
	_, lookErr := pod.VRF(c.name)
	created := errors.Is(lookErr, netops.ErrNotFound)
	if _, err := pod.EnsureVRF(c.name, c.table); err != nil {
		return nil, vrfErr(err)
	}
	if err := pod.EnslaveToVRF(c.name, a.IfName); err != nil {
		if created {
			_ = pod.DeleteLink(c.name)
		}
		return nil, vrfErr(err)
	}
	return prev, nil
}

// vrfErr codes a kernel failure: a VRF name taken by another device or by
// a VRF with another table, or an interface with another master, is a
// config error (7), a kernel without VRF devices too (netops names it); the rest is 5.
func vrfErr(err error) error {
	switch {
	case errors.Is(err, netops.ErrExists):
		return cniplug.ConfError("vrfname", "%v; pick another vrfname, or give the table the existing VRF has (or none)", err)
	case errors.Is(err, netops.ErrNotSupported):
		return cniplug.ConfError("vrfname", "%v", err)
	case errors.Is(err, netops.ErrNotFound):
		return cniplug.Errorf(types.ErrIOFailure, "vrf: %v (is CNI_IFNAME in the pod?)", err)
	}
	return cniplug.Errorf(types.ErrIOFailure, "vrf: %w", err)
}

// vrfCheck verifies that CNI_IFNAME is in the VRF (and the VRF has the
// configured table).
func vrfCheck(_ context.Context, a *cniplug.Args, c *vrfConf, _ *current.Result) error {
	return podns.In(a.Netns, func(pod *netops.Handle) error {
		table, err := pod.VRF(c.name)
		if err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "vrf CHECK: %v", err)
		}
		if c.table != 0 && table != c.table {
			return cniplug.Errorf(types.ErrIOFailure, "vrf CHECK: VRF %q has table %d, not %d", c.name, table, c.table)
		}
		members, err := pod.VRFMembers(c.name)
		if err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "vrf CHECK: %v", err)
		}
		for _, m := range members {
			if m == a.IfName {
				return nil
			}
		}
		return cniplug.Errorf(types.ErrIOFailure, "vrf CHECK: %q is not in VRF %q", a.IfName, c.name)
	})
}

// vrfDel takes CNI_IFNAME out of the VRF and deletes the VRF when it was
// the last. A namespace, VRF or interface that is gone, or a device of
// that name that is not a VRF: nothing to do.
func vrfDel(_ context.Context, a *cniplug.Args, c *vrfConf) error {
	return podns.InIfThere(a.Netns, "vrf", func(pod *netops.Handle) error {
		if _, err := pod.ReleaseFromVRF(c.name, a.IfName); err != nil && !errors.Is(err, netops.ErrExists) {
			return cniplug.Errorf(types.ErrIOFailure, "vrf DEL: %w", err)
		}
		return nil
	})
}
