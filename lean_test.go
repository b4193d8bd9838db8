package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLeanBinary keeps the heavy clients out of cnibox: every CNI call is a
// fresh process, and the etcd client (+2 ms per exec) or client-go (+4 ms,
// +20 MiB) would cost more than a whole ADD. They belong in cnibox-agent;
// the DHCP client library (+0.14 ms) in cnibox-dhcp. The gratuitous ARP
// library (netops/announce: +65 KB, the inits of hash/crc32 and
// josharian/native) is the agent's only.
func TestLeanBinary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/cnibox/cnibox").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	forbidden := []string{"google.golang.org/grpc", "go.etcd.io/etcd/client", "k8s.io/client-go", "github.com/prometheus/client_golang", "github.com/insomniacslk/dhcp", "golang.zx2c4.com/wireguard", "github.com/mdlayher/arp"}
	for _, dep := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if strings.HasPrefix(dep, f) {
				t.Errorf("cnibox links %s: heavy clients belong in cmd/cnibox-agent (the DHCP client in cmd/cnibox-dhcp) only", dep)
			}
		}
	}
}

// TestDispatch: a role name as argv[0] or as the first argument runs the
// role; a role run without CNI_COMMAND explains itself and exits 0, as the
// reference plugins do (nerdctl's version probe needs exit 0).
func TestDispatch(t *testing.T) {
	t.Setenv("CNI_COMMAND", "")
	if code := run([]string{"/opt/cni/bin/bridge.exe"}); code != 0 {
		t.Errorf("bridge.exe without CNI_COMMAND: exit %d, want 0", code)
	}
	if code := run([]string{"cnibox", "host-local"}); code != 0 {
		t.Errorf("cnibox host-local without CNI_COMMAND: exit %d, want 0", code)
	}
	if code := run([]string{"cnibox", "roles"}); code != 0 {
		t.Errorf("cnibox roles: exit %d, want 0", code)
	}
}
