//go:build !nokube

package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/agent/services"
	"github.com/cnibox/cnibox/netops"
)

// TestServiceProxyWithoutTable: --service-proxy in a build whose services
// table is not linked (newServicesTable nil) refuses to start, saying
// so, before it serves anything; with a table the check passes.
func TestServiceProxyWithoutTable(t *testing.T) {
	f, err := parseFlags([]string{"--service-proxy", "--kube-api-url", "http://127.0.0.1:1", "--node-name", "n1", "--data-dir", t.TempDir()}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	was := newServicesTable
	t.Cleanup(func() { newServicesTable = was })
	newServicesTable = nil
	err = runAgent(context.Background(), f, flannelEnv{}, slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil)))
	if !errors.Is(err, errNoServicesTable) || !strings.Contains(err.Error(), "--service-proxy") {
		t.Errorf("runAgent = %v, want the refusal naming --service-proxy", err)
	}
	newServicesTable = func(*netops.Handle) services.Table { return nil }
	if err := checkServices(f); err != nil {
		t.Errorf("with a table: %v", err)
	}
}

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
