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
