package vlan

import (
	"context"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/lower"
	"github.com/cnibox/cnibox/roles/internal/podns"
)

// check runs lower's CHECK (master, kind, up, MAC, addresses, routes, IPAM's
// CHECK) and then checks that the pod's device carries the config's VLAN
// ID and, when the config sets one, its MTU, as the reference does.
func check(ctx context.Context, a *cniplug.Args, c conf) error {
	lc, err := kind.ParseConf(a)
	if err != nil {
		return err
	}
	if err := lower.Check(ctx, a, lc); err != nil {
		return err
	}
	return podns.In(a.Netns, func(pod *netops.Handle) error {
		v, err := pod.VlanByName(a.IfName)
		if err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "interface %q in the pod: %w", a.IfName, err)
		}
		if v.ID != c.VlanID {
			return cniplug.Errorf(types.ErrIOFailure, "vlan %q in the pod has VLAN ID %d, the config says %d", a.IfName, v.ID, c.VlanID)
		}
		if c.MTU != 0 && v.MTU != c.MTU {
			return cniplug.Errorf(types.ErrIOFailure, "vlan %q in the pod has MTU %d, the config says %d", a.IfName, v.MTU, c.MTU)
		}
		return nil
	})
}
