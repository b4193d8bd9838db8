//go:build nokube

package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/cnibox/cnibox/agent"
)

// validateNodePortAddresses: this build hands --service-proxy over to
// cnibox-agent-kube (handoff_nokube.go), which checks the flag.
func validateNodePortAddresses(string) error { return nil }

// startServices: this build has no Kubernetes client, and Services live
// in the API server (--service-proxy hands over to cnibox-agent-kube).
func startServices(_ context.Context, f *flags, _ *agent.Health, _ *slog.Logger) (func(), <-chan error, error) {
	if f.svc.proxy {
		return nil, nil, errors.New("--service-proxy: this cnibox-agent is built without the Kubernetes client (tag nokube)")
	}
	return func() {}, nil, nil
}
