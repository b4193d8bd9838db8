//go:build !nokube

package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/cnibox/cnibox/agent/cluster"
	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/agent/lbipam"
	"github.com/cnibox/cnibox/agent/lease/kubelease"
	"github.com/cnibox/cnibox/agent/netconf"
)

// newKubeManager returns the Kubernetes lease backend.
func newKubeManager(_ context.Context, f *flags, cfg *netconf.Config, log *slog.Logger) (manager, func(), error) {
	m, err := kubelease.New(kubelease.Config{
		Cluster:                   f.cluster(),
		AnnotationPrefix:          f.kubeAnnotationPrefix,
		NetConf:                   cfg,
		SetNodeNetworkUnavailable: f.setNodeNetworkUnavailable,
		Cache:                     f.kube.cache,
		Log:                       log,
	})
	if err != nil {
		return nil, nil, err
	}
	return m, func() {}, nil
}

// kubeState is what the agent's Kubernetes features share: the one
// informer cache of pods, namespaces, nodes, Services and EndpointSlices
// (agent/cluster) that every reader of them reads (the NetworkPolicy
// watcher, MultiNetworkPolicy, egress gateways, the pod API, the cluster
// IPAM's reclaim, the overlay's peers, the Services proxy, the
// domainNames resolvers, the LoadBalancer IPAM), so that the API server
// sees one list and one watch of each kind, and the agent holds one slim
// copy of each object.
type kubeState struct {
	cache *cluster.Cache // nil before startKube: each feature makes its own
}

// startKube makes the informer cache, run until ctx ends (its informers
// start with their first reader). It keeps this node's pods' UIDs and
// annotations (the pod API's), with --kube-subnet-mgr the overlay's
// annotations of the nodes (--kube-annotation-prefix), and with --lb-ipam
// the LoadBalancer IPAM's part of each Service. The pod API reads
// the informer of every pod when a reader of every pod runs anyway (the
// NetworkPolicy watcher and egress gateways beside the overlay,
// MultiNetworkPolicy), else one of its node's pods alone.
func startKube(ctx context.Context, f *flags, log *slog.Logger) error {
	cfg := cluster.Config{Cluster: f.cluster(), Log: log, ClusterPods: clusterPodReaders(f)}
	if f.lb.on {
		cfg.LoadBalancer = lbipam.ServiceView // (the elected IPAM reads the Services of the cache)
	}
	if f.kubeSubnetMgr {
		prefix := f.kubeAnnotationPrefix
		if prefix == "" {
			prefix = kubelease.DefaultAnnotationPrefix
		}
		an, err := kubelease.NewAnnotations(prefix)
		if err != nil {
			return fmt.Errorf("--kube-annotation-prefix: %w", err)
		}
		cfg.NodeAnnotations = an.Peers()
	}
	f.kube.cache = cluster.NewWith(cfg)
	f.kube.cache.Start(ctx)
	return nil
}

// clusterPodReaders reports whether f starts a reader of every pod of the
// cluster for the agent's life: MultiNetworkPolicy (--multi-network-policies),
// or the overlay's Kubernetes backend (--kube-subnet-mgr), beside which the
// NetworkPolicy watcher (--network-policy) and egress gateways run, unless
// the agent serves the pod API or the cluster IPAM only. (The cluster
// IPAM's reclaim reads every pod only while its agent holds the Lease.)
func clusterPodReaders(f *flags) bool {
	return f.multiNetworkPolicies || (f.kubeSubnetMgr && !f.pod.only && !f.ipam.only)
}

// cluster is how both Kubernetes clients (the lease backend and the pod API)
// reach the API server.
func (f *flags) cluster() kubeapi.Cluster {
	return kubeapi.Cluster{Kubeconfig: f.kubeconfig, APIURL: f.kubeAPIURL, NodeName: f.nodeName}
}

// resolveNodeName returns this node's name for the Kubernetes clients:
// --node-name, else $NODE_NAME, else, as flanneld finds it in a DaemonSet,
// the spec.nodeName of the pod $POD_NAMESPACE/$POD_NAME (read from the API
// server), else the hostname (flanneld stops there with an error).
func resolveNodeName(ctx context.Context, f *flags, env flannelEnv, log *slog.Logger) (string, error) {
	if f.nodeName != "" || env.nodeName != "" {
		return nodeName(f.nodeName, env), nil
	}
	ns, name, ok := env.podRef()
	if !ok {
		return nodeName("", env), nil
	}
	c := f.cluster()
	c.NodeName = "-" // not needed to read a pod
	_, client, err := c.Connect("kube", &kubeapi.Pod{}, &kubeapi.PodList{})
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	pod := &kubeapi.Pod{}
	if err := kubeapi.Get(ctx, client, kubeapi.Ref{Resource: "pods", Namespace: ns, Name: name}, pod); err != nil {
		return "", fmt.Errorf("kube: read the pod $POD_NAMESPACE/$POD_NAME (%s/%s) for this node's name: %w (grant get on pods, or set --node-name / $NODE_NAME)", ns, name, err)
	}
	if pod.Spec.NodeName == "" {
		return "", fmt.Errorf("kube: the pod %s/%s ($POD_NAMESPACE/$POD_NAME) has no spec.nodeName: it is not scheduled; set --node-name or $NODE_NAME", ns, name)
	}
	log.Info("node name from the agent's pod", "pod", ns+"/"+name, "node", pod.Spec.NodeName)
	return pod.Spec.NodeName, nil
}
