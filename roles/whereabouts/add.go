package whereabouts

import (
	"context"
	"errors"
	"net/netip"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/roles/internal/ipamrole"
)

// How long the role waits for the agent: whereabouts' own limits
// (AddTimeLimit, DelTimeLimit), since a busy pool can take a while.
const (
	addTimeout = 2 * time.Minute
	delTimeout = time.Minute
)

// add asks the agent for an address of every range, then adds the static
// addresses, the routes and the DNS settings. A failed call reserves
// nothing: the agent undoes what it wrote before it answers.
func add(ctx context.Context, a *cniplug.Args, cfg *config) (types.Result, error) {
	var ips []ipamrole.Address
	if len(cfg.Ranges) > 0 {
		req, err := cfg.request(a)
		if err != nil {
			return nil, err
		}
		c := &agentapi.Client{Socket: cfg.Socket, Timeout: addTimeout}
		resp, err := c.IPAM(ctx, agentapi.OpIPAMAdd, req)
		if err != nil {
			err = agentErr(cfg, "reserve an address", err)
			cfg.logf(a, "error", "ADD %s/%s of pod %q: %v", a.ContainerID, a.IfName, req.PodRef, err)
			return nil, err
		}
		if len(resp.IPs) != len(cfg.Ranges) {
			return nil, cniplug.Errorf(types.ErrIOFailure, "whereabouts: cnibox-agent answered %d addresses for %d ranges: a bug in the agent", len(resp.IPs), len(cfg.Ranges))
		}
		for _, s := range resp.IPs {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return nil, cniplug.Errorf(types.ErrIOFailure, "whereabouts: cnibox-agent answered %q, not an address: a bug in the agent", s)
			}
			ad := ipamrole.Address{Addr: p}
			if cfg.Gateway.IsValid() && cfg.Gateway.Is4() == p.Addr().Is4() {
				ad.Gateway = cfg.Gateway
			}
			ips = append(ips, ad)
		}
		cfg.logf(a, "debug", "ADD %s/%s of pod %q: %v", a.ContainerID, a.IfName, req.PodRef, resp.IPs)
	}
	ips = append(ips, cfg.Addresses...)
	return ipamrole.Result(ips, cfg.Routes, cfg.DNS), nil
}

// agentErr maps the agent's answers to CNI codes: the agent or the API
// unreachable is "try again later" (11), a full range 100, an address held by
// another pod 7.
func agentErr(cfg *config, what string, err error) error {
	var un *agentapi.UnreachableError
	var ae *agentapi.Error
	switch {
	case errors.As(err, &un):
		return cniplug.Errorf(types.ErrTryAgainLater, "whereabouts: %s: %w: run cnibox-agent with --cluster-ipam on this node (its socket is %s; \"agentSocket\" in ipam names another)", what, err, cfg.Socket)
	case errors.As(err, &ae) && ae.Reason == agentapi.ReasonExhausted:
		return cniplug.Errorf(cniplug.CodePoolExhausted, "whereabouts: %s: %w", what, err)
	case errors.As(err, &ae) && (ae.Reason == agentapi.ReasonConflict || ae.Reason == agentapi.ReasonBadRequest):
		return cniplug.Errorf(types.ErrInvalidNetworkConfig, "whereabouts: %s: %w", what, err)
	case errors.As(err, &ae):
		return cniplug.Errorf(types.ErrTryAgainLater, "whereabouts: %s: cnibox-agent: %w", what, err)
	}
	return cniplug.Errorf(types.ErrIOFailure, "whereabouts: %s: %w", what, err)
}
