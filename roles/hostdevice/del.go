package hostdevice

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/roles/internal/podns"
)

// del gives the device back to the node, then frees the addresses and the
// record (which a failure to give it back keeps, for the next DEL).
// Everything already gone counts as done.
func del(ctx context.Context, a *cniplug.Args, c *conf) error {
	ep, found, err := endpoint(a, c)
	if err != nil {
		return err
	}
	st := stateOf(ep)
	if !found {
		// No record (an attachment the reference made): its alias says
		// the device's name, as the reference keeps it.
		st = fromAlias(a)
	}
	if st.Name != "" {
		if err := giveBack(a.Netns, a.IfName, st); err != nil {
			return err
		}
		a.Mark("move")
	}
	return attach.Release(ctx, a, c.DataDir, nil)
}

// gc gives back the devices of this network's attachments that are not in
// the valid list and deletes their records; then GC of the IPAM plugin
// frees their addresses.
func gc(ctx context.Context, a *cniplug.Args, c *conf) error {
	_, stale, err := attach.Endpoints(a, c.DataDir)
	if err != nil {
		return err
	}
	for _, ep := range stale {
		if st := stateOf(ep); st.Name != "" {
			if err := giveBack(ep.Netns, ep.IfName, st); err != nil {
				return err
			}
		}
	}
	return attach.FinishGC(ctx, a, c.DataDir, stale)
}

// fromAlias returns the node name of the pod's CNI_IFNAME from its alias
// ("" when it has none, or is gone).
func fromAlias(a *cniplug.Args) netops.DeviceState {
	pod, err := netops.Open(a.Netns)
	if err != nil {
		return netops.DeviceState{}
	}
	defer pod.Close()
	alias, _ := pod.LinkAlias(a.IfName)
	return netops.DeviceState{Name: alias}
}

// giveBack returns the device st describes to the node as st says it was:
// from the pod's namespace netns, where it is ifname; or, when it is not
// there, from the node itself (an earlier call moved it and failed after, or
// the kernel gave a physical device back to the node when the namespace
// went, under the pod's name or devN, its alias intact). A device in
// neither place went with the namespace (a virtual one: veth, macvlan) and
// there is nothing to give back.
func giveBack(netns, ifname string, st netops.DeviceState) error {
	host, err := podns.Host()
	if err != nil {
		return err
	}
	defer host.Close()
	if netns != "" {
		if pod, err := netops.Open(netns); err == nil {
			defer pod.Close()
			if l, err := pod.LinkByName(ifname); err == nil && ours(pod, l, st) {
				return moveOut(pod, host, ifname, st)
			}
		}
	}
	if _, err := host.LinkByName(st.Name); err == nil {
		return restore(host, st.Name, st)
	}
	back, err := host.LinksByAlias(st.Name)
	if err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	if len(back) == 0 {
		return nil
	}
	// Several with that alias: the one with the device's MAC.
	i := max(0, slices.IndexFunc(back, func(l netops.Link) bool { return l.MAC.String() == st.MAC.String() }))
	return restore(host, back[i].Name, st)
}

// ours reports whether the pod's link l is the device st describes: its
// alias is the device's node name, or (the alias cleared) it has its MAC.
func ours(pod *netops.Handle, l netops.Link, st netops.DeviceState) bool {
	if alias, err := pod.LinkAlias(l.Name); err == nil && alias == st.Name {
		return true
	}
	return len(st.MAC) > 0 && l.MAC.String() == st.MAC.String()
}

// moveOut moves the pod's ifname back to the node under its name, without
// alias, and restores st.
func moveOut(pod, host *netops.Handle, ifname string, st netops.DeviceState) error {
	none := ""
	_, err := pod.MoveLink(netops.MoveOpts{Name: ifname, Into: host, NewName: st.Name, Alias: &none})
	if errors.Is(err, netops.ErrExists) {
		return cniplug.Errorf(types.ErrIOFailure, "give %q back to the node as %q: the node has another interface %q: rename or remove it, then DEL again: %w", ifname, st.Name, st.Name, err)
	}
	if err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "give %q back to the node as %q: %w", ifname, st.Name, err)
	}
	return restore(host, st.Name, st)
}

// restore gives the node's device name (st.Name, or the name the kernel
// gave it) back the state st.
func restore(host *netops.Handle, name string, st netops.DeviceState) error {
	if err := host.RestoreDevice(name, st); err != nil {
		return cniplug.WithCode(types.ErrIOFailure, fmt.Errorf("the device is on the node but not as it was: %w", err))
	}
	return nil
}
