//go:build !nokube

package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/cnibox/cnibox/agent/mnp"
	"github.com/cnibox/cnibox/agent/podapi"
	"github.com/cnibox/cnibox/agent/podresources"
)

// startPodAPI listens on --socket and serves the pod API from the informer
// cache until ctx ends; wait returns once it has stopped, with the
// server's error.
func startPodAPI(ctx context.Context, f *flags, log *slog.Logger) (wait func() error, err error) {
	cfg := podapi.Config{Cluster: f.cluster(), Cache: f.kube.cache, Log: log}
	if f.pod.podResources != "" {
		cfg.Devices = podresources.New(f.pod.podResources)
	}
	if f.multiNetworkPolicies {
		sy, err := policySyncer(ctx, f, log)
		if err != nil {
			return nil, err
		}
		w, err := mnp.New(mnp.Config{Cluster: f.cluster(), Cache: f.kube.cache, Log: log, DataDir: f.dataDir, Syncer: sy})
		if err != nil {
			return nil, err
		}
		cfg.Admit = w.Admit
		go func() {
			if err := w.Run(ctx); err != nil && ctx.Err() == nil {
				log.Error("multi-network policy watcher stopped", "err", err)
			}
		}()
	}
	k, err := podapi.NewKube(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := podapi.Listen(f.pod.socket, f.pod.group)
	if err != nil {
		return nil, err
	}
	go k.Run(ctx)
	done := make(chan error, 1)
	go func() {
		// Calls before the first list are answered from the API server.
		if !k.WaitSynced(ctx, 10*time.Second) && ctx.Err() == nil {
			log.Warn("pod API: the informer cache has not listed the pods yet; answering from the API server meanwhile")
		}
	}()
	go func() {
		acc := podapi.Access{GID: f.pod.group, NamespaceIsolation: f.pod.namespaceIsolation, NADTrust: f.pod.nadTrust, IPAM: f.ipam.handle}
		if f.kubeSubnetMgr && f.networkPolicy {
			acc.Policy = admitter.Serve
		}
		done <- podapi.Serve(ctx, ln, k, log, acc)
	}()
	log.Info("pod API listening", "socket", f.pod.socket, "nadTrustedNamespaces", f.pod.nadTrust.String())
	return func() error { return <-done }, nil
}
