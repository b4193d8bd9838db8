//go:build !nokube

package main

import (
	"context"
	"log/slog"

	"github.com/cnibox/cnibox/agent/clusteripam"
)

// newKubeIPAM is the cluster IPAM on whereabouts' CRDs; its informer and
// its leaked-address reclaim (one agent, by a coordination Lease) run
// until ctx ends.
func newKubeIPAM(ctx context.Context, f *flags, node string, log *slog.Logger) (clusteripam.Backend, error) {
	rc, err := f.cluster().Config("cluster IPAM")
	if err != nil {
		return nil, err
	}
	k, err := clusteripam.NewKube(rc, f.ipam.namespace, log)
	if err != nil {
		return nil, err
	}
	go k.Run(ctx)
	if f.ipam.reclaimInterval > 0 {
		r := &clusteripam.Reclaimer{Kube: k, Alloc: &clusteripam.Allocator{B: k, Node: node, Log: log}, Identity: node, Interval: f.ipam.reclaimInterval,
			Pods: f.kube.cache, Log: log}
		go r.Run(ctx)
	}
	return k, nil
}
