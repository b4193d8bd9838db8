package main

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// The clients that create the bench's objects: -clients of them, each on
// a connection of its own (client-go shares one HTTP/2 connection among
// clients of one configuration, and one connection's streams are served
// by one API server goroutine's reads), speaking protobuf (JSON's
// encoding and decoding were most of the API server's CPU in a create),
// without a client-side rate limit. Creating 30,000 Services and their
// EndpointSlices through one JSON client, 16 at once, took 26 minutes
// here (docs/benchmarks.md).

// creators returns n clients of the control plane in kcp.
func creators(kcp string, n int) ([]kubernetes.Interface, error) {
	out := make([]kubernetes.Interface, 0, n)
	for range n {
		rc, err := clientcmd.BuildConfigFromFlags("", filepath.Join(kcp, "kubeconfig"))
		if err != nil {
			return nil, err
		}
		rc.ContentType = "application/vnd.kubernetes.protobuf"
		rc.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
		rc.QPS, rc.Burst = -1, 0 // (no rate limit)
		// A Dial of its own: client-go caches transports by
		// configuration, and never one with a Dial, so each client opens
		// its own connection.
		d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
		rc.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		}
		cs, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return nil, fmt.Errorf("client %d: %w", len(out), err)
		}
		out = append(out, cs)
	}
	return out, nil
}

// creator is the client for object i.
func (c *cluster) creator(i int) kubernetes.Interface {
	if len(c.creators) == 0 {
		return c.cs
	}
	return c.creators[i%len(c.creators)]
}
