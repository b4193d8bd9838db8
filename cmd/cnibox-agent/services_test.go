//go:build !nokube

package main

import (
	"bytes"
	"strings"
	"testing"
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
