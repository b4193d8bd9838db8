package bridge

import (
	"context"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/store"
)

// gc removes what belongs to attachments of this network that are not in the
// valid list: endpoint records, host veths (also ours on the bridge with no
// record), masquerade entries; then GC of the IPAM plugin releases addresses.
func gc(ctx context.Context, a *cniplug.Args, defaults Conf) error {
	c, err := parseConf(a, defaults)
	if err != nil {
		return err
	}
	st, err := openStore(a, c)
	if err != nil {
		return err
	}
	eps, err := st.Endpoints(a.Conf.Name)
	st.Close()
	if err != nil {
		return err
	}
	keepVeth := map[string]bool{}
	for _, k := range a.Conf.GCKeep() {
		keepVeth[c.hostVethName(k.ContainerID, k.IfName)] = true
	}
	keepIP := map[netip.Addr]bool{}
	var stale []store.Endpoint
	for _, ep := range eps {
		if a.Conf.Keeps(ep.ContainerID, ep.IfName) {
			for _, p := range ep.IPs {
				keepIP[p.Addr()] = true
			}
			continue
		}
		stale = append(stale, ep)
	}

	host, err := netops.Open("")
	if err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	defer host.Close()
	if err := gcMasq(host, a.Conf.Name, keepIP); err != nil {
		return err
	}
	if err := gcVeths(host, c.Bridge, keepVeth, c.isOurVeth); err != nil {
		return err
	}
	if err := c.gcHook(ctx, a, host, eps); err != nil {
		return err
	}
	if err := gcMacSpoof(host, keepVeth, c.isOurVeth); err != nil {
		return err
	}
	if len(stale) > 0 {
		st, err := openStore(a, c)
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

// gcMasq deletes this network's masquerade entries whose pod is not kept.
func gcMasq(host *netops.Handle, network string, keep map[netip.Addr]bool) error {
	entries, err := host.MasqEntries()
	if err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	var drop []netip.Addr
	for _, e := range entries {
		if e.Network == network && !keep[e.PodIP] {
			drop = append(drop, e.PodIP)
		}
	}
	if len(drop) == 0 {
		return nil
	}
	if err := host.DeleteMasq(drop); err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "remove stale masquerade entries %v: %w", drop, err)
	}
	return nil
}

// gcVeths deletes our veths on the bridge that belong to no kept attachment.
func gcVeths(host *netops.Handle, bridge string, keep map[string]bool, ours func(string) bool) error {
	br, err := host.LinkByName(bridge)
	if err != nil {
		return nil // no bridge, no ports
	}
	links, err := host.Links()
	if err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	for _, l := range links {
		if l.MasterIndex != br.Index || !ours(l.Name) || keep[l.Name] {
			continue
		}
		if err := host.DeleteLink(l.Name); err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "delete stale veth %s: %w", l.Name, err)
		}
	}
	return nil
}
