package sbr

import (
	"context"
	"errors"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/podns"
)

// sbrDel deletes the rules from the addresses of CNI_IFNAME (those on the
// interface and those prevResult gives it) to the configured table, or to
// any table from 100 on, whose routes of the interface it flushes too. A
// namespace or interface that is gone leaves nothing to do.
func sbrDel(_ context.Context, a *cniplug.Args, c *sbrConf) error {
	return podns.InIfThere(a.Netns, "sbr", func(pod *netops.Handle) error { return sbrDelIn(pod, a, c) })
}

// sbrDelIn is sbrDel in the pod's namespace.
func sbrDelIn(pod *netops.Handle, a *cniplug.Args, c *sbrConf) error {
	srcs := map[netip.Addr]bool{}
	have, err := pod.AllAddrs(a.IfName)
	if err != nil && !errors.Is(err, netops.ErrNotFound) {
		return cniplug.Errorf(types.ErrIOFailure, "sbr: addresses of %q: %w", a.IfName, err)
	}
	for _, p := range have {
		srcs[p.Addr().Unmap()] = true
	}
	if prev, err := a.Conf.PrevResult(); err == nil && prev != nil {
		for _, ad := range sbrAddrs(prev, a.IfName) {
			srcs[ad.ip.Addr()] = true
		}
	}
	if len(srcs) == 0 {
		return nil
	}
	rules, err := pod.Rules()
	if err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "sbr: %w", err)
	}
	var errs []error
	for _, r := range rules {
		if !r.Src.IsSingleIP() || !srcs[r.Src.Addr().Unmap()] {
			continue
		}
		if (c.table != 0 && r.Table != c.table) || (c.table == 0 && r.Table < sbrFirstTable) {
			continue
		}
		if err := pod.DeleteRule(r); err != nil {
			errs = append(errs, err)
		}
		if c.table == 0 {
			if err := pod.FlushTableRoutes(a.IfName, r.Table); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "sbr DEL: %w", err)
	}
	return nil
}
