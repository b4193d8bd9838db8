//go:build nokube

package main

import (
	"context"
	"log/slog"
	"net/netip"

	"github.com/cnibox/cnibox/agent"
)

// startLBAnnounce: this build hands --kube-subnet-mgr (which
// --lb-announce needs) over to cnibox-agent-kube before it gets here.
func startLBAnnounce(context.Context, *flags, *agent.Health, []netip.Prefix, *slog.Logger) func() {
	return func() {}
}
