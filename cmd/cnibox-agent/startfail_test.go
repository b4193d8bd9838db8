//go:build !nokube

package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops/nstest"
)

// TestPodAPIStartFailureExits: with --pod-api, an overlay that cannot start
// (no such interface, a public IP of the wrong family) ends the agent with
// the error instead of leaving it blocked in the pod API: a DaemonSet or
// systemd can only restart what exits.
//
// The first case gets as far as the overlay's start, after the agent has
// cleaned up its namespace (the DNS proxy's routing rules and table): it
// runs as root only, in TestMain's private namespace, never in the
// caller's (a user gets EPERM there; root would change the machine).
func TestPodAPIStartFailureExits(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
		// inNetns: the start reaches the kernel (see above)
		inNetns bool
	}{
		{"no such interface", []string{"--iface", "nosuch0"}, "nosuch0", true},
		{"bad public IP", []string{"--public-ip", "2001:db8::1"}, "--public-ip", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.inNetns {
				nstest.RequireRoot(t)
				if !nstest.InPrivateNetns() {
					t.Skip("not in the private namespace of nstest.MainInPrivateNetns: the agent would clean up the machine's own")
				}
			}
			dir := t.TempDir()
			netConf := filepath.Join(dir, "net-conf.json")
			if err := os.WriteFile(netConf, []byte(`{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan"}}`), 0o600); err != nil {
				t.Fatal(err)
			}
			// The kube backend with an API server that does not answer:
			// the start fails before any request is due. No policy: it
			// would turn on the machine's br_netfilter sysctls, and the
			// flow log would make /var/log/cnibox.
			args := append([]string{"--pod-api", "--socket", filepath.Join(dir, "pod.sock"),
				"--network-policy=false", "--flow-log-file", "",
				"--kube-subnet-mgr", "--net-config-path", netConf,
				"--kube-api-url", "http://127.0.0.1:1", "--node-name", "n1", "--data-dir", dir,
				"--subnet-file", filepath.Join(dir, "subnet.env")}, tc.args...)
			f, err := parseFlags(args, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			done := make(chan error, 1)
			go func() {
				done <- runAgent(context.Background(), f, flannelEnv{}, slog.New(slog.NewTextHandler(&logs, nil)))
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("runAgent = %v, want an error naming %s", err, tc.want)
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("runAgent still running after 60 s: the failed start was not returned\nlogs:\n%s", logs.String())
			}
		})
	}
}
