package hostdevice

import (
	"errors"
	"fmt"
	"slices"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/podns"
)

// moveIn moves the node's device name into the pod as ifname, its node
// name as its alias.
func moveIn(host, pod *netops.Handle, ifname, name string) (netops.Link, error) {
	l, err := host.MoveLink(netops.MoveOpts{Name: name, Into: pod, NewName: ifname, Alias: &name})
	if errors.Is(err, netops.ErrExists) {
		return l, cniplug.Errorf(cniplug.CodeIfaceExists, "move %q into the pod: %w", name, err)
	}
	if err != nil {
		return l, cniplug.Errorf(types.ErrIOFailure, "move %q into the pod: %w", name, err)
	}
	return l, nil
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
