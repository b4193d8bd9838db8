//go:build nokube

package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/cnibox/cnibox/agent/clusteripam"
)

// newKubeIPAM: this build has no Kubernetes client (kubeHandoff execs the
// full build first).
func newKubeIPAM(context.Context, *flags, string, *slog.Logger) (clusteripam.Backend, error) {
	return nil, errors.New("--cluster-ipam-backend kube: this cnibox-agent is built without the Kubernetes client (tag nokube)")
}
