package bandwidth

import (
	"context"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/podns"
)

// bandwidthCheck verifies the tbf on the host end of the pod's veth, and
// the ifb with its tbf and the redirect to it, against the configured rates.
func bandwidthCheck(_ context.Context, a *cniplug.Args, c *bwLimits, prev *current.Result) error {
	if c.isZero() {
		return nil
	}
	return podns.InHost(func(host *netops.Handle) error {
		hostIf, err := bwHostIf(host, a.Netns, a.IfName, prev)
		if err != nil {
			return err
		}
		if c.IngressRate > 0 {
			if err := bwCheckTBF(host, hostIf.Name, "ingressRate", netops.NewTBF(c.IngressRate/8, c.IngressBurst/8)); err != nil {
				return err
			}
		}
		if c.EgressRate == 0 {
			return nil
		}
		ifbName := bwIfbName(a.ContainerID, a.IfName)
		ifb, found, err := bwIfb(host, ifbName)
		if err != nil {
			return err
		}
		if !found {
			return cniplug.Errorf(types.ErrIOFailure, "bandwidth CHECK: the ifb device %s for egressRate is missing", ifbName)
		}
		if err := bwCheckTBF(host, ifbName, "egressRate", netops.NewTBF(c.EgressRate/8, c.EgressBurst/8)); err != nil {
			return err
		}
		to, found, err := host.IngressRedirect(hostIf.Name)
		if err != nil {
			return cniplug.WithCode(types.ErrIOFailure, err)
		}
		if !found || to != ifb.Index {
			return cniplug.Errorf(types.ErrIOFailure, "bandwidth CHECK: packets from the pod arriving on %s are not redirected to %s (egressRate)", hostIf.Name, ifbName)
		}
		return nil
	})
}

func bwCheckTBF(host *netops.Handle, link, field string, want netops.TBF) error {
	got, found, err := host.RootTBF(link)
	if err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	if !found {
		return cniplug.Errorf(types.ErrIOFailure, "bandwidth CHECK: %s has no tbf qdisc (%s)", link, field)
	}
	if got != want {
		return cniplug.Errorf(types.ErrIOFailure, "bandwidth CHECK: the tbf on %s shapes to %d bytes/s (buffer %d, limit %d), the config (%s) asks for %d bytes/s (buffer %d, limit %d)",
			link, got.Rate, got.Buffer, got.Limit, field, want.Rate, want.Buffer, want.Limit)
	}
	return nil
}
