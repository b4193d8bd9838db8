package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops/nstest"
	testbin "github.com/cnibox/cnibox/test/internal/binaries"
	"github.com/cnibox/cnibox/test/internal/flanneld"
)

func TestMain(m *testing.M) { nstest.MainInPrivateNetns(m) }

// wgScaleNodes is the N of the wireguard row (the 5,000 peers).
const wgScaleNodes = 5000

// TestWireGuardScale is bench-scale's wireguard row on etcd, for a kernel
// that has WireGuard: this machine's has none, so it runs in make
// test-kernel's Debian 6.1 guest, by hand:
//
//	go run ./test/kernel -pkgs ./test/benchscale -run TestWireGuardScale
//
// Under the guest's TCG the times mean nothing; what the row gives is the
// functional figure (every one of the 5,000 peers on flannel-wg exactly as
// published, a removed one gone) and the agent's RSS, beside flanneld's
// when the guest has it, and the vxlan row of the same binaries on the same
// kernel to compare the RSS with. Elsewhere it skips.
func TestWireGuardScale(t *testing.T) {
	if err := kernelHas(typeWireGuard); err != nil {
		t.Skipf("this kernel has no WireGuard (%v): run it with go run ./test/kernel -pkgs ./test/benchscale", err)
	}
	_, agent := testbin.CniboxAndAgent(t, "cnibox-agent")
	sides := []struct{ name, bin string }{{"cnibox-agent", agent}}
	if dir := os.Getenv(flanneld.DirEnv); dir != "" {
		sides = append(sides, struct{ name, bin string }{"flanneld", filepath.Join(dir, "flanneld")})
	}
	o := &options{timeout: 30 * time.Minute, verbose: testing.Verbose()}
	for _, typ := range []string{typeVXLAN, typeWireGuard} {
		for _, s := range sides {
			r, err := etcdRun(o, s.bin, wgScaleNodes, typ)
			r.Backend, r.Type, r.Agent, r.Nodes = "etcd", typ, s.name, wgScaleNodes
			if err != nil {
				t.Errorf("%s %s N=%d: %v", typ, s.name, wgScaleNodes, err)
				continue
			}
			if r.Mismatches > 0 {
				t.Errorf("%s %s: %d of %d peers missing, wrong or extra after convergence", typ, s.name, r.Mismatches, wgScaleNodes)
			}
			r.print()
		}
	}
}
