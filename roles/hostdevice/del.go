package hostdevice

import (
	"context"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/attach"
)

// del gives the device back to the node, then frees the addresses and the
// record (which a failure to give it back keeps, for the next DEL).
// Everything already gone counts as done.
func del(ctx context.Context, a *cniplug.Args, c *conf) error {
	st, err := recorded(a, c)
	if err != nil {
		return err
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
