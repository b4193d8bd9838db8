package hostdevice

import (
	"context"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/attach"
)

// check verifies the attachment against prevResult after IPAM's CHECK: the
// pod's CNI_IFNAME is up, with the result's MAC (the device's), addresses
// and routes. A DPDK device (as the reference, check asks sysfs) has
// nothing in the pod to check.
func check(ctx context.Context, a *cniplug.Args, c *conf) error {
	if t, err := targetOf(c); err == nil {
		if dpdk, _ := t.dpdk(); dpdk {
			_, _, err := attach.Prev(ctx, a)
			return err
		}
	}
	return attach.Check(ctx, a, attach.CheckOpts{Prev: attach.Prev})
}
