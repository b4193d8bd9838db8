package tap

import (
	"context"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/podns"
)

// check runs lower's CHECK (a "tun" device, up, MAC, addresses, routes,
// IPAM's CHECK) and then checks that the pod's device is a tap with the
// config's queue mode, owner, group, bridge and MTU.
func check(ctx context.Context, a *cniplug.Args, c conf) error {
	if err := spec.CheckBare(ctx, a, c.Conf); err != nil {
		return err
	}
	return podns.In(a.Netns, func(pod *netops.Handle) error {
		t, err := pod.TapByName(a.IfName)
		if err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "interface %q in the pod: %w", a.IfName, err)
		}
		if err := checkTap(t, a.IfName, c); err != nil {
			return err
		}
		if c.Bridge == "" {
			if t.MasterIndex != 0 {
				return cniplug.Errorf(types.ErrIOFailure, "tap %q in the pod is a port of a bridge, the config names none", a.IfName)
			}
			return nil
		}
		br, err := pod.LinkByName(c.Bridge)
		if err != nil || br.Index != t.MasterIndex {
			return cniplug.Errorf(types.ErrIOFailure, "tap %q in the pod is not a port of bridge %q (%v)", a.IfName, c.Bridge, err)
		}
		return nil
	})
}

// checkTap checks the tap's own attributes against the config.
func checkTap(t netops.Tap, name string, c conf) error {
	bad := func(what string, have, want any) error {
		return cniplug.Errorf(types.ErrIOFailure, "tap %q in the pod has %s %v, the config says %v", name, what, have, want)
	}
	switch {
	case !t.IsTap:
		return cniplug.Errorf(types.ErrIOFailure, "interface %q in the pod is a tun device, not a tap", name)
	case t.MultiQueue != c.MultiQueue:
		return bad("multiQueue", t.MultiQueue, c.MultiQueue)
	case !sameID(t.Owner, c.Owner):
		return bad("owner", idString(t.Owner), idString(c.Owner))
	case !sameID(t.Group, c.Group):
		return bad("group", idString(t.Group), idString(c.Group))
	case c.MTU != 0 && t.MTU != c.MTU:
		return bad("MTU", t.MTU, c.MTU)
	}
	return nil
}

func sameID(a, b *uint32) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func idString(v *uint32) any {
	if v == nil {
		return "none"
	}
	return *v
}
