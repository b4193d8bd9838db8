package firewall

import (
	"context"
	"errors"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/fault"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/roles/internal/podns"
)

// codeNotReady is STATUS's "plugin not available" (spec 1.1).
const codeNotReady = 50

// rules returns what the attachment asks of the forward path.
func rules(a *cniplug.Args, c *firewallConf, prev *current.Result) (nft.FirewallRules, error) {
	r := nft.FirewallRules{
		AdminChain: c.IptablesAdminChainName,
		Owner:      owner(a.Conf.Name, a.ContainerID, a.IfName),
		Addrs:      podAddrs(prev, a.IfName),
		Ingress:    c.IngressPolicy,
		Lock:       func() (func(), error) { return lockRules(a) },
	}
	r.Bridge = bridgeOf(prev)
	if c.IngressPolicy == nft.IngressSameBridge {
		if r.Bridge == "" {
			return r, cniplug.ConfError("ingressPolicy", "%q needs the pod's bridge, and prevResult lists no interface on the node: chain the firewall after the bridge plugin, or use \"open\"", c.IngressPolicy)
		}
	}
	return r, nil
}

// firewallAdd lets the pod's addresses through and returns prevResult: into
// firewalld's zone when the backend is firewalld's, else (and for an
// ingressPolicy) as cnibox's nftables rules.
func firewallAdd(ctx context.Context, a *cniplug.Args, c *firewallConf, prev *current.Result) (_ types.Result, err error) {
	r, err := rules(a, c, prev)
	if err != nil {
		return nil, err
	}
	a.Mark("config")
	fc, err := firewalldFor(ctx, c, types.ErrIOFailure)
	if err != nil {
		return nil, err
	}
	if fc != nil {
		defer fc.Close()
		if err := firewalldAdd(ctx, fc, c, r.Addrs); err != nil {
			return nil, err
		}
		a.Mark("firewalld")
		if !needsRules(c) {
			return prev, nil
		}
		defer func() {
			if err != nil {
				_ = firewalldDel(context.WithoutCancel(ctx), a)
			}
		}()
	}
	host, err := podns.Host()
	if err != nil {
		return nil, err
	}
	defer host.Close()
	var undo cniplug.Undo
	defer undo.Finish(&err)
	undo.Push(func() { _ = host.NFT().DeleteFirewall(r) })
	if err := host.NFT().EnsureFirewall(r); err != nil {
		return nil, cniplug.Errorf(types.ErrIOFailure, "firewall: %w", err)
	}
	a.Mark("elements")
	fault.Point("firewall/add/after-rules")
	undo.Discard()
	return prev, nil
}

// firewallCheck verifies that the pod's addresses are in firewalld's zone,
// or that its rules and the jumps are in place.
func firewallCheck(ctx context.Context, a *cniplug.Args, c *firewallConf, prev *current.Result) error {
	r, err := rules(a, c, prev)
	if err != nil {
		return err
	}
	fc, err := firewalldFor(ctx, c, types.ErrIOFailure)
	if err != nil {
		return err
	}
	if fc != nil {
		defer fc.Close()
		if err := firewalldCheck(ctx, fc, c, r.Addrs); err != nil || !needsRules(c) {
			return err
		}
	}
	host, err := podns.Host()
	if err != nil {
		return err
	}
	defer host.Close()
	if err := host.NFT().CheckFirewall(r); err != nil {
		if errors.Is(err, netops.ErrNotFound) {
			return cniplug.Errorf(types.ErrIOFailure, "firewall CHECK: %v", err)
		}
		return cniplug.Errorf(types.ErrIOFailure, "firewall CHECK: %w", err)
	}
	return nil
}
