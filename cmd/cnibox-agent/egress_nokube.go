//go:build nokube

package main

import (
	"context"
	"log/slog"
	"net/netip"

	"github.com/cnibox/cnibox/agent"
)

// startEgress: this build has no Kubernetes client, and EgressGateways
// live in the API server (--kube-subnet-mgr does not reach this build
// either).
func startEgress(context.Context, *flags, *agent.Health, []netip.Prefix, *slog.Logger) func() {
	return func() {}
}
