package firewall

import (
	"context"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/roles/internal/podns"
)

// firewallDel removes the attachment's elements: those of prevResult's
// addresses (single-element messages, whatever the number of pods), or
// with no prevResult every element whose comment is the attachment's
// (listing the maps). It needs neither the pod's namespace nor any field
// of the config but the network's name (so a config ADD would refuse, or
// backend "firewalld", still deletes). The chains and jumps stay, the
// admin chain with the operators' rules too. Rules of the older layout
// that the attachment still has go as well. Under firewalld it first
// unbinds prevResult's addresses from the zone (firewalldDel).
func firewallDel(ctx context.Context, a *cniplug.Args, _ *firewallConf) error {
	if err := firewalldDel(ctx, a); err != nil {
		return err
	}
	a.Mark("firewalld")
	host, err := podns.Host()
	if err != nil {
		return err
	}
	defer host.Close()
	r := nft.FirewallRules{
		Owner: owner(a.Conf.Name, a.ContainerID, a.IfName),
		Lock:  func() (func(), error) { return lockRules(a) },
	}
	if prev, err := a.Conf.PrevResult(); err == nil && prev != nil {
		r.Addrs, r.Bridge = podAddrs(prev, a.IfName), bridgeOf(prev)
	}
	if err := host.NFT().DeleteFirewall(r); err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "firewall DEL: %w", err)
	}
	a.Mark("elements")
	return nil
}

// firewallGC removes the elements (and older rules) of this network's
// attachments that are not in the valid list.
func firewallGC(_ context.Context, a *cniplug.Args, _ *firewallConf) error {
	host, err := podns.Host()
	if err != nil {
		return err
	}
	defer host.Close()
	prefix := ownerPrefix(a.Conf.Name)
	keep := map[string]bool{}
	for _, k := range a.Conf.GCKeep() {
		keep[owner(a.Conf.Name, k.ContainerID, k.IfName)] = true
	}
	del := func(o string) bool { return strings.HasPrefix(o, prefix) && !keep[o] }
	if err := host.NFT().DeleteFirewallOwned(del, func() (func(), error) { return lockRules(a) }); err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "firewall GC: %w", err)
	}
	return nil
}
