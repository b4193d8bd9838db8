//go:build nokube

package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/cnibox/cnibox/agent/netconf"
)

// newKubeManager: this build has no Kubernetes backend.
func newKubeManager(context.Context, *flags, *netconf.Config, *slog.Logger) (manager, func(), error) {
	return nil, nil, errors.New("--kube-subnet-mgr: this cnibox-agent is built without the Kubernetes backend (tag nokube)")
}

// resolveNodeName: this build reaches no API server (the handoff to
// cnibox-agent-kube happens before), so the name is --node-name, else
// $NODE_NAME, else the hostname.
func resolveNodeName(_ context.Context, f *flags, env flannelEnv, _ *slog.Logger) (string, error) {
	return nodeName(f.nodeName, env), nil
}

// kubeState: this build has no Kubernetes features to share anything.
type kubeState struct{}

// startKube: this build has no informer cache.
func startKube(context.Context, *flags, *slog.Logger) error { return nil }
