package hostdevice

import (
	"context"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/roles/internal/lower"
	"github.com/cnibox/cnibox/roles/internal/podns"
)

// check verifies the attachment against prevResult after IPAM's CHECK: the
// pod's CNI_IFNAME is the device the record names (by its alias), up, with
// the result's MAC, addresses and routes. A DPDK device has nothing in the
// pod to check.
func check(ctx context.Context, a *cniplug.Args, c *conf) error {
	prev, podIdx, err := attach.Prev(ctx, a)
	if err != nil {
		return err
	}
	ep, found, err := endpoint(a, c)
	if err != nil {
		return err
	}
	if found && ep.Extra[keyDPDK] == "true" {
		return nil
	}
	pod, err := podns.Open(a.Netns)
	if err != nil {
		return err
	}
	defer pod.Close()
	l, err := pod.LinkByName(a.IfName)
	if err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "interface %q in the pod: %w", a.IfName, err)
	}
	if name := ep.Extra[keyDevice]; found {
		if alias, _ := pod.LinkAlias(a.IfName); alias != name {
			return cniplug.Errorf(types.ErrIOFailure, "interface %q in the pod is not the node's device %q (its alias is %q)", a.IfName, name, alias)
		}
	}
	_, err = lower.CheckDevice(pod, a, l.Kind, prev, podIdx)
	return err
}
