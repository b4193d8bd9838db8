//go:build !nokube

package main

import (
	"context"
	"log/slog"

	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/agent/lease/kubelease"
	"github.com/cnibox/cnibox/agent/netconf"
)

// newKubeManager returns the Kubernetes lease backend.
func newKubeManager(_ context.Context, f *flags, cfg *netconf.Config, log *slog.Logger) (manager, func(), error) {
	m, err := kubelease.New(kubelease.Config{
		Cluster:          f.cluster(),
		AnnotationPrefix: f.kubeAnnotationPrefix,
		NetConf:          cfg,
		Log:              log,
	})
	if err != nil {
		return nil, nil, err
	}
	return m, func() {}, nil
}

// cluster is how both Kubernetes clients (the lease backend and the pod API)
// reach the API server.
func (f *flags) cluster() kubeapi.Cluster {
	return kubeapi.Cluster{Kubeconfig: f.kubeconfig, APIURL: f.kubeAPIURL, NodeName: f.nodeName}
}
