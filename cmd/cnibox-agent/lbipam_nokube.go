//go:build nokube

package main

import (
	"context"
	"log/slog"

	"github.com/cnibox/cnibox/agent"
)

// startLBIPAM: this build hands --lb-ipam over to cnibox-agent-kube
// (handoff_nokube.go) before it gets here.
func startLBIPAM(context.Context, *flags, *agent.Health, *slog.Logger) func() { return func() {} }
