package attach

import (
	"context"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/store"
)

// Endpoints returns the endpoint records of the call's network, split into
// those GC keeps (in cni.dev/valid-attachments) and the stale rest.
func Endpoints(a *cniplug.Args, dataDir string) (kept, stale []store.Endpoint, err error) {
	st, err := OpenStore(a, dataDir)
	if err != nil {
		return nil, nil, err
	}
	eps, err := st.Endpoints(a.Conf.Name)
	st.Close()
	if err != nil {
		return nil, nil, err
	}
	for _, ep := range eps {
		if a.Conf.Keeps(ep.ContainerID, ep.IfName) {
			kept = append(kept, ep)
		} else {
			stale = append(stale, ep)
		}
	}
	return kept, stale, nil
}

// DeleteStaleVeths deletes the host veths that the stale attachments'
// records name (one already gone counts as deleted).
func DeleteStaleVeths(host *netops.Handle, stale []store.Endpoint) error {
	for _, ep := range stale {
		if ep.HostVeth == "" {
			continue
		}
		if err := host.DeleteLink(ep.HostVeth); err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "delete stale veth %s: %w", ep.HostVeth, err)
		}
	}
	return nil
}

// FinishGC deletes the stale records (after the role removed their kernel
// state) and runs the IPAM plugin's GC, which frees their addresses.
func FinishGC(ctx context.Context, a *cniplug.Args, dataDir string, stale []store.Endpoint) error {
	if len(stale) > 0 {
		st, err := OpenStore(a, dataDir)
		if err != nil {
			return err
		}
		for _, ep := range stale {
			if err := st.DeleteEndpoint(ep.Network, ep.ContainerID, ep.IfName); err != nil {
				st.Close()
				return err
			}
		}
		st.Close()
	}
	if t := a.Conf.IPAM.Type; t != "" {
		return a.DelegateGC(ctx, t, a.StdinData)
	}
	return nil
}

// Status is ready when the IPAM plugin is (or there is none). It reads
// no field of the role's config C but the ipam section's type: a role's
// ConfVerbs names it with ParseStatus cniplug.Unparsed[C].
func Status[C any](ctx context.Context, a *cniplug.Args, _ C) error {
	if a.Conf.IPAM.Type == "" {
		return nil
	}
	return a.DelegateStatus(ctx, a.Conf.IPAM.Type, a.StdinData)
}
