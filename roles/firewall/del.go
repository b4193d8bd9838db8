package firewall

import (
	"context"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/podns"
)

// firewallDel removes the attachment's rules, found by their owner comment:
// it needs neither prevResult nor the pod's namespace, and reads no field
// of the config but the network's name (so a config ADD would refuse, or
// backend "firewalld", still deletes). The chains and jumps stay, the
// admin chain with the operators' rules too. Under firewalld it first
// unbinds prevResult's addresses from the zone (firewalldDel).
func firewallDel(ctx context.Context, a *cniplug.Args) error {
	if err := firewalldDel(ctx, a); err != nil {
		return err
	}
	host, err := podns.Host()
	if err != nil {
		return err
	}
	defer host.Close()
	unlock, err := lockRules(a)
	if err != nil {
		return err
	}
	defer unlock()
	own := owner(a.Conf.Name, a.ContainerID, a.IfName)
	if err := host.DeleteFirewall(func(o string) bool { return o == own }); err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "firewall DEL: %w", err)
	}
	return nil
}

// firewallGC removes the rules of this network's attachments that are not
// in the valid list.
func firewallGC(_ context.Context, a *cniplug.Args) error {
	host, err := podns.Host()
	if err != nil {
		return err
	}
	defer host.Close()
	unlock, err := lockRules(a)
	if err != nil {
		return err
	}
	defer unlock()
	prefix := ownerPrefix(a.Conf.Name)
	keep := map[string]bool{}
	for _, k := range a.Conf.GCKeep() {
		keep[owner(a.Conf.Name, k.ContainerID, k.IfName)] = true
	}
	if err := host.DeleteFirewall(func(o string) bool { return strings.HasPrefix(o, prefix) && !keep[o] }); err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "firewall GC: %w", err)
	}
	return nil
}
