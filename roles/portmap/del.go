package portmap

import (
	"context"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/fault"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/roles/internal/podns"
	"github.com/cnibox/cnibox/store"
)

// portmapDel removes the attachment's mappings: those of its record, or,
// without one, the elements under the configured host ports that carry the
// attachment's name. It needs neither the netns nor prevResult, and
// succeeds when everything is gone already.
func portmapDel(_ context.Context, a *cniplug.Args, c *portmapConf) error {
	rec, found, err := pmRecord(a, c)
	if err != nil {
		return err
	}
	owner := pmOwner(a.Conf.Name, a.ContainerID, a.IfName)
	if !found && len(c.entries) == 0 {
		return nil
	}
	host, err := podns.Host()
	if err != nil {
		return err
	}
	// Close after the store update: the kernel's cleanup of the deleted
	// elements runs meanwhile (see perf-notes).
	defer host.Close()
	var pm nft.PortMaps
	if found {
		pm = portMapsOf(rec)
	} else if pm, err = ownedPortMaps(host, a, c, owner); err != nil {
		return err
	}
	if err := host.NFT().DeletePortMaps(pm); err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "remove port mappings: %w", err)
	}
	fault.Point("portmap/del/after-nft")
	if !found {
		return nil
	}
	st, err := pmStore(a, c)
	if err != nil {
		return err
	}
	defer st.Close()
	err = Records.Update(st, func(tx store.KindTx[Record]) error {
		return tx.Delete(a.Conf.Name, a.ContainerID, a.IfName)
	})
	if err == nil {
		fault.Point("portmap/del/after-record")
	}
	return err
}

// ownedPortMaps finds, without a record, the elements of the configured
// host ports (both families, or those of prevResult) and of the pod
// addresses that carry owner's name.
func ownedPortMaps(host *netops.Handle, a *cniplug.Args, c *portmapConf, owner string) (nft.PortMaps, error) {
	ips := []netip.Prefix{netip.PrefixFrom(netip.IPv4Unspecified(), 32), netip.PrefixFrom(netip.IPv6Unspecified(), 128)}
	var podIPs []netip.Addr
	if prev, err := a.Conf.PrevResult(); err == nil && prev != nil {
		if p := podPrefixes(prev, a.IfName); len(p) > 0 {
			ips = p
		}
		for _, p := range podPrefixes(prev, a.IfName) {
			podIPs = append(podIPs, p.Addr())
		}
	}
	keys, err := c.portMaps(owner, ips)
	if err != nil {
		keys = nft.PortMaps{} // conflicting entries: nothing was set up
	}
	out := nft.PortMaps{Owner: owner}
	found, err := host.NFT().LookupPortMaps(nft.PortMaps{Mappings: keys.Mappings})
	if err != nil {
		return out, cniplug.WithCode(types.ErrIOFailure, err)
	}
	for _, f := range found {
		if f.Owner == owner {
			out.Mappings = append(out.Mappings, f.Mappings...)
			for _, m := range f.Mappings {
				podIPs = append(podIPs, m.PodIP)
			}
		}
	}
	var q nft.PortMaps
	seen := map[netip.Addr]bool{}
	for _, ip := range podIPs {
		if !seen[ip] {
			seen[ip] = true
			q.Masq = append(q.Masq, nft.PortMasq{PodIP: ip})
		}
	}
	found, err = host.NFT().LookupPortMaps(q)
	if err != nil {
		return out, cniplug.WithCode(types.ErrIOFailure, err)
	}
	for _, f := range found {
		if f.Owner == owner {
			out.Masq = append(out.Masq, f.Masq...)
		}
	}
	return out, nil
}

// portmapGC removes the mappings of this network's attachments that are not
// in the valid list: those of stale records and any element whose comment
// names such an attachment.
func portmapGC(_ context.Context, a *cniplug.Args, c *portmapConf) error {
	st, err := pmStore(a, c)
	if err != nil {
		return err
	}
	var recs []Record
	err = Records.View(st, func(tx store.KindTx[Record]) error {
		recs, err = tx.List(a.Conf.Name)
		return err
	})
	st.Close()
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, k := range a.Conf.GCKeep() {
		keep[pmOwner(a.Conf.Name, k.ContainerID, k.IfName)] = true
	}

	host, err := podns.Host()
	if err != nil {
		return err
	}
	defer host.Close()
	entries, err := host.NFT().PortMapEntries()
	if err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	network := ownerNetwork(pmOwner(a.Conf.Name, "x", "x"))
	var stale []nft.PortMaps
	for _, e := range entries {
		if ownerNetwork(e.Owner) == network && !keep[e.Owner] {
			stale = append(stale, e)
		}
	}
	var staleRecs []Record
	for _, r := range recs {
		if !a.Conf.Keeps(r.ContainerID, r.IfName) {
			staleRecs = append(staleRecs, r)
			stale = append(stale, portMapsOf(r))
		}
	}
	if err := host.NFT().DeletePortMaps(stale...); err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "remove stale port mappings: %w", err)
	}
	if len(staleRecs) == 0 {
		return nil
	}
	st, err = pmStore(a, c)
	if err != nil {
		return err
	}
	defer st.Close()
	return Records.Update(st, func(tx store.KindTx[Record]) error {
		for _, r := range staleRecs {
			if err := tx.Delete(r.Network, r.ContainerID, r.IfName); err != nil {
				return err
			}
		}
		return nil
	})
}
