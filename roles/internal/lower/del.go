package lower

import (
	"context"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/attach"
)

// Del is the DEL of every kind: it frees the addresses and the endpoint
// record, then deletes the pod's device of c's kind. Everything already
// gone counts as removed; with the pod's namespace gone, its device went
// with it.
func Del(ctx context.Context, a *cniplug.Args, c *Conf) error {
	s := c.spec
	if err := attach.Release(ctx, a, c.DataDir, nil); err != nil {
		return err
	}
	a.Mark("release")
	if err := attach.DeletePodLink(a, s.Kind); err != nil {
		return err
	}
	a.Mark(s.Kind)
	return nil
}

// GC is the GC of every kind: it deletes the devices (of c's kind) of this
// network's attachments that are not in the valid list (when their
// namespace still exists) and their records; then GC of the IPAM plugin
// frees their addresses.
func GC(ctx context.Context, a *cniplug.Args, c *Conf) error {
	s := c.spec
	_, stale, err := attach.Endpoints(a, c.DataDir)
	if err != nil {
		return err
	}
	for _, ep := range stale {
		if err := deleteDevice(ep.Netns, ep.IfName, s.Kind); err != nil {
			return err
		}
	}
	return attach.FinishGC(ctx, a, c.DataDir, stale)
}

// deleteDevice deletes ifname in the namespace at netns when it is a device
// of kind; a namespace or device that is gone is no error.
func deleteDevice(netns, ifname, kind string) error {
	if netns == "" {
		return nil
	}
	pod, err := netops.Open(netns)
	if err != nil {
		return nil
	}
	defer pod.Close()
	l, err := pod.LinkByName(ifname)
	if err != nil || l.Kind != kind {
		return nil
	}
	if err := pod.DeleteLink(ifname); err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "delete stale %s %s in %s: %w", kind, ifname, netns, err)
	}
	return nil
}
