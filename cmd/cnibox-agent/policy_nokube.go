//go:build nokube

package main

import (
	"context"
	"log/slog"

	"github.com/cnibox/cnibox/agent"
)

// startPolicy: this build has no Kubernetes client, and NetworkPolicies
// live in the API server: nothing to enforce (--kube-subnet-mgr does not
// reach this build either).
func startPolicy(context.Context, *flags, *agent.Health, *slog.Logger) error { return nil }
