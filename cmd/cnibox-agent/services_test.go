//go:build !nokube

package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/agent"
	"github.com/cnibox/cnibox/internal/svcmodel"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
)

// TestServiceFlags: the proxy's flags, their defaults and their errors.
func TestServiceFlags(t *testing.T) {
	f, err := parseFlags(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if f.svc.proxy || f.svc.nodePortAddresses != "primary" || f.svc.resync.Seconds() != 60 {
		t.Errorf("defaults: proxy %v, nodeport-addresses %q, resync %s; want off, primary, 60s", f.svc.proxy, f.svc.nodePortAddresses, f.svc.resync)
	}
	f, err = parseFlags([]string{"--cluster-cidr", "10.244.0.0/16, fd00:10:244::/56", "--nodeport-addresses", "192.0.2.0/24"}, &bytes.Buffer{})
	if err != nil || len(f.svc.cidrs) != 2 {
		t.Errorf("--cluster-cidr of two networks: %v, %v", f, err)
	}
	for _, bad := range [][]string{{"--service-resync", "0s"}, {"--cluster-cidr", "10.244.0.0"}, {"--nodeport-addresses", "eth0"}} {
		if _, err := parseFlags(bad, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%q: %v, want an error naming %s", bad, err, bad[0])
		}
	}
}

// TestServiceProxyOnly: --service-proxy-only turns the proxy on without
// the overlay, and each combination it cannot run with is an error naming
// the flag and the fix; --service-proxy alone no longer falls to the etcd
// lease path unasked.
func TestServiceProxyOnly(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	cidr := []string{"--cluster-cidr", "10.244.0.0/16"}
	f, err := parseFlagsEnv(append([]string{"--service-proxy-only", "--kubeconfig-file", "/etc/kube/node.conf"}, cidr...), &bytes.Buffer{}, noEnv)
	if err != nil || !f.svc.proxy || !f.svc.only {
		t.Fatalf("--service-proxy-only with a kubeconfig: proxy %v only %v, %v; want both on", f != nil && f.svc.proxy, f != nil && f.svc.only, err)
	}
	// in a pod: in-cluster config
	if _, err := parseFlagsEnv(append([]string{"--service-proxy-only"}, cidr...), &bytes.Buffer{},
		env("KUBERNETES_SERVICE_HOST", "10.96.0.1", "KUBERNETES_SERVICE_PORT", "443")); err != nil {
		t.Errorf("--service-proxy-only in a pod: %v", err)
	}
	// the overlay on etcd, named, with the proxy
	if _, err := parseFlagsEnv([]string{"--service-proxy", "--etcd-endpoints", "http://192.0.2.1:2379"}, &bytes.Buffer{}, noEnv); err != nil {
		t.Errorf("--service-proxy with --etcd-endpoints: %v", err)
	}
	if _, err := parseFlagsEnv([]string{"--service-proxy"}, &bytes.Buffer{}, env("FLANNELD_ETCD_ENDPOINTS", "http://192.0.2.1:2379")); err != nil {
		t.Errorf("--service-proxy with $FLANNELD_ETCD_ENDPOINTS: %v", err)
	}
	for _, c := range []struct {
		args  []string
		names []string // what the error must name
	}{
		{append([]string{"--service-proxy-only"}, cidr...), []string{"--service-proxy-only", "--kubeconfig-file", "KUBERNETES_SERVICE_HOST"}},
		{[]string{"--service-proxy-only", "--kubeconfig-file", "k"}, []string{"--service-proxy-only", "--cluster-cidr"}},
		{append([]string{"--service-proxy-only", "--kubeconfig-file", "k", "--kube-subnet-mgr"}, cidr...), []string{"--service-proxy-only", "--kube-subnet-mgr"}},
		{append([]string{"--service-proxy-only", "--kubeconfig-file", "k", "--service-proxy=false"}, cidr...), []string{"--service-proxy=false"}},
		{[]string{"--service-proxy", "--kubeconfig-file", "k"}, []string{"--service-proxy-only", "--etcd-endpoints"}},
		{[]string{"--cleanup-kube-proxy", "--kube-subnet-mgr"}, []string{"--cleanup-kube-proxy", "--service-proxy"}},
	} {
		_, err := parseFlagsEnv(c.args, &bytes.Buffer{}, noEnv)
		for _, n := range c.names {
			if err == nil || !strings.Contains(err.Error(), n) {
				t.Errorf("%q: %v; want an error naming %s", c.args, err, n)
			}
		}
	}
}

// TestServicesTableLeftToItsOwner: an agent without --service-proxy
// removes the services table an earlier agent of its own left, but an
// agent that does no kernel work (--pod-api-only, --cluster-ipam-only:
// the Multus-style DaemonSet's, run without a capability) leaves it to
// the daemon that owns the node's network. Before, it tried to remove it
// and, refused (no CAP_NET_ADMIN), exited: the DaemonSet never came up.
func TestServicesTableLeftToItsOwner(t *testing.T) {
	nstest.RequireRoot(t)
	if !nstest.InPrivateNetns() {
		t.Skip("not in the private namespace of nstest.MainInPrivateNetns: the test writes a services table")
	}
	h, err := netops.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	t.Cleanup(func() { _ = newServicesTable(h).Delete() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, c := range []struct {
		args []string
		kept bool
	}{
		{[]string{"--pod-api-only"}, true},
		{[]string{"--cluster-ipam-only"}, true},
		{nil, false}, // the overlay's agent: the table is its own
	} {
		if err := newServicesTable(h).Apply(&svcmodel.Snapshot{}); err != nil {
			t.Fatal(err)
		}
		f, err := parseFlags(c.args, &bytes.Buffer{})
		if err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		stop, _, err := startServices(context.Background(), f, &agent.Health{}, log)
		if err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		stop()
		if _, ok, err := h.NFT().ServicesFrontendCount(); err != nil || ok != c.kept {
			t.Errorf("%q: services table there %v (%v), want %v", c.args, ok, err, c.kept)
		}
	}
}
