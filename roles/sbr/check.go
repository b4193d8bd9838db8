package sbr

import (
	"context"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/podns"
)

// sbrCheck verifies that every address of CNI_IFNAME in prevResult has its
// rule (to the configured table, or to one from 100 on). The reference's
// CHECK does nothing.
func sbrCheck(_ context.Context, a *cniplug.Args, c *sbrConf, prev *current.Result) error {
	return podns.In(a.Netns, func(pod *netops.Handle) error {
		for _, ad := range sbrAddrs(prev, a.IfName) {
			have, err := sbrHasRule(pod, ad.single, c.table)
			if err != nil {
				return err
			}
			if !have {
				return cniplug.Errorf(types.ErrIOFailure, "sbr CHECK: no rule 'from %s lookup <table>' for interface %q in the pod; run ADD again", ad.single, a.IfName)
			}
		}
		return nil
	})
}
