package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/cnibox/cnibox/agent/clusteripam"
	"github.com/cnibox/cnibox/agent/lease/etcdlease"
	"github.com/cnibox/cnibox/agent/podapi"
	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/store"
)

// clusterIPAMFlags configure the cluster IPAM (the whereabouts CNI role's
// pools, in whereabouts' CRDs or in etcd).
type clusterIPAMFlags struct {
	serve      bool
	only       bool
	backend    string
	namespace  string
	etcdPrefix string
	// reclaimInterval: how often the holder of the reclaim Lease looks
	// for addresses of deleted pods (0: never).
	reclaimInterval time.Duration
	// nodeSlice: the node slice size of networks that name no
	// node_slice_size (zero: off).
	nodeSlice clusteripam.SliceDefault
	// handle answers the role's calls once started (startClusterIPAM).
	handle func(ctx context.Context, req agentapi.Request) *agentapi.Response
}

func (c *clusterIPAMFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&c.serve, "cluster-ipam", false, "also serve the cluster IPAM of the whereabouts CNI role on --socket (cnibox)")
	fs.BoolVar(&c.only, "cluster-ipam-only", false, "serve only the cluster IPAM (and the pod API with --pod-api): no lease, no overlay (cnibox)")
	fs.StringVar(&c.backend, "cluster-ipam-backend", "kube", "where the pools live: kube (whereabouts' CRDs through --kubeconfig-file / in-cluster config) or etcd (--etcd-endpoints) (cnibox)")
	fs.StringVar(&c.namespace, "cluster-ipam-namespace", "kube-system", "kube: namespace of the pools (whereabouts keeps them in kube-system unless its kubeconfig's context names another) (cnibox)")
	fs.DurationVar(&c.reclaimInterval, "cluster-ipam-reclaim-interval", 15*time.Second, "kube: how often one agent (the holder of the Lease "+
		"cnibox-whereabouts-reclaim) frees the addresses of deleted pods; one found gone twice in a row is freed; 0 turns it off (cnibox)")
	fs.StringVar(&c.etcdPrefix, "cluster-ipam-etcd-prefix", "/cnibox/whereabouts", "etcd: key prefix of the pools (cnibox)")
	fs.Var(&c.nodeSlice, "cluster-ipam-node-slice-size", "the node slice `size` (/26, or /26,/120 with an IPv6 one) of the networks that name no node_slice_size: "+
		"only for clusters where nothing else (whereabouts, an agent without this flag) allocates their ranges, which would not see the slices; "+
		"a network of one range larger than a slice, without range_start/range_end, is sliced; others keep their plain pool (cnibox)")
}

// enabled reports whether the cluster IPAM runs.
func (c *clusterIPAMFlags) enabled() bool { return c.serve || c.only }

// needsKube reports whether the cluster IPAM needs the Kubernetes client.
func (c *clusterIPAMFlags) needsKube() bool { return c.enabled() && c.backend != "etcd" }

// startClusterIPAM builds the backend, starts what keeps it current (the
// pool informer, the queue of releases, the reclaim of leaked addresses)
// until ctx ends, and sets f.ipam.handle.
func startClusterIPAM(ctx context.Context, f *flags, log *slog.Logger) error {
	var (
		b   clusteripam.Backend
		err error
	)
	node := f.nodeName // resolved by runAgent
	switch f.ipam.backend {
	case "kube":
		b, err = newKubeIPAM(ctx, f, node, log)
	case "etcd":
		b, err = newEtcdIPAM(ctx, f, log)
	default:
		err = fmt.Errorf("--cluster-ipam-backend %q: use kube or etcd", f.ipam.backend)
	}
	if err != nil {
		return err
	}
	dir := store.DirFrom(f.dataDir, nil)
	srv := &clusteripam.Server{
		Alloc:   &clusteripam.Allocator{B: b, Node: node, Log: log, DataDir: dir, DefaultSlice: f.ipam.nodeSlice},
		DataDir: dir,
		Log:     log,
	}
	go srv.Alloc.Recover(ctx)
	go srv.Drain(ctx, 10*time.Second)
	f.ipam.handle = srv.Handle
	log.Info("cluster IPAM serving", "backend", f.ipam.backend, "node", node, "default_node_slice_size", f.ipam.nodeSlice.String())
	return nil
}

// serveIPAMOnly serves the socket for the cluster IPAM alone (no pod API).
func serveIPAMOnly(ctx context.Context, f *flags, log *slog.Logger) (wait func() error, err error) {
	if f.ipam.handle == nil {
		return nil, errors.New("cluster IPAM not started")
	}
	ln, err := podapi.Listen(f.pod.socket, f.pod.group)
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() {
		done <- podapi.Serve(ctx, ln, nil, log, podapi.Access{GID: f.pod.group, IPAM: f.ipam.handle})
	}()
	log.Info("cluster IPAM listening", "socket", f.pod.socket)
	return func() error { return <-done }, nil
}

// newEtcdIPAM is the cluster IPAM on etcd (--etcd-endpoints and its TLS
// and auth flags), for hosts without Kubernetes.
func newEtcdIPAM(ctx context.Context, f *flags, log *slog.Logger) (clusteripam.Backend, error) {
	m, err := etcdlease.New(etcdlease.Config{
		Endpoints: splitList(f.etcdEndpoints),
		CAFile:    f.etcdCAFile, CertFile: f.etcdCertfile, KeyFile: f.etcdKeyfile,
		Username: f.etcdUsername, Password: f.etcdPassword,
		Log: log,
	})
	if err != nil {
		return nil, err
	}
	context.AfterFunc(ctx, func() { m.Close() })
	return &clusteripam.Etcd{Client: m.Client(), Prefix: f.ipam.etcdPrefix}, nil
}
