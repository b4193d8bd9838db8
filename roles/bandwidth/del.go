package bandwidth

import (
	"context"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/fault"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/chain"
	"github.com/cnibox/cnibox/roles/internal/podns"
)

// bandwidthDel removes the attachment's qdiscs from the host end of its veth
// (when that is still there) and its ifb device (Records.Del then removes
// its record). Without a record it still deletes the ifb by its
// deterministic name, and finds the host end through prevResult when the
// pod's namespace is left.
func bandwidthDel(_ context.Context, a *cniplug.Args, rec Record, found bool) error {
	return podns.InHost(func(host *netops.Handle) error {
		hostIf, ifb, ingress := rec.HostIf, rec.Ifb, rec.IngressRate > 0
		if !found {
			ifb, ingress = bwIfbName(a.ContainerID, a.IfName), true
			if prev, err := a.Conf.PrevResult(); err == nil && prev != nil && a.Netns != "" {
				if l, err := bwHostIf(host, a.Netns, a.IfName, prev); err == nil {
					hostIf = l.Name
				}
			}
		}
		if err := bwTeardown(host, hostIf, ifb, ingress); err != nil {
			return err
		}
		fault.Point("bandwidth/del/after-teardown")
		return nil
	})
}

// bandwidthGC tears down the attachments of this network that are not in
// the valid list, and deletes ifb devices of cnibox's that no record of any
// network names (left by a crash).
func bandwidthGC(_ context.Context, a *cniplug.Args, _ *bwLimits) error {
	return podns.InHost(func(host *netops.Handle) error {
		// Links before records: ADD writes its record before it creates the
		// ifb, so every ifb seen here that an ADD is making has its record in
		// the read below.
		links, err := host.Links()
		if err != nil {
			return cniplug.WithCode(types.ErrIOFailure, err)
		}
		st, err := chain.OpenRecords(a)
		if err != nil {
			return err
		}
		var recs []Record
		if st != nil {
			recs, err = Records.In(st).List("")
			st.Close()
			if err != nil {
				return err
			}
		}

		keepIfb := map[string]bool{}
		for _, k := range a.Conf.GCKeep() {
			keepIfb[bwIfbName(k.ContainerID, k.IfName)] = true
		}
		var stale []Record
		for _, r := range recs {
			if r.Network == a.Conf.Name && !a.Conf.Keeps(r.ContainerID, r.IfName) {
				stale = append(stale, r)
				continue
			}
			if r.Ifb != "" {
				keepIfb[r.Ifb] = true
			}
		}
		for _, r := range stale {
			if err := bwTeardown(host, r.HostIf, r.Ifb, r.IngressRate > 0); err != nil {
				return err
			}
		}
		for _, l := range links {
			if l.Kind != "ifb" || !bwIsOurIfb(l.Name) || keepIfb[l.Name] {
				continue
			}
			if err := host.DeleteLink(l.Name); err != nil {
				return cniplug.Errorf(types.ErrIOFailure, "delete stale ifb %s: %w", l.Name, err)
			}
		}
		if len(stale) == 0 {
			return nil
		}
		st, err = chain.OpenStore(a)
		if err != nil {
			return err
		}
		defer st.Close()
		for _, r := range stale {
			if err := Records.In(st).Delete(r.Network, r.ContainerID, r.IfName); err != nil {
				return err
			}
		}
		return nil
	})
}
