package main

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cnibox/cnibox/netops"
)

// The private namespace holds the underlay bridge (10.77.0.254/16) and the
// control plane, bound to every address so that the node namespaces reach
// it over the bridge. The nodes of the n-th configuration set up are
// 10.77.n.1 and 10.77.n.2 (no address is used twice in a run: no stale
// neighbour entry on the bridge's side).
const (
	underlayBridge = "dpbr0"
	clusterCIDR    = "10.244.0.0/16"
)

var (
	// apiPort is control-plane.sh's (16443 unless $KCP_API_PORT moves it).
	apiPort    = cmp.Or(os.Getenv("KCP_API_PORT"), "16443")
	underlayGW = netip.MustParsePrefix("10.77.0.254/16")
	clusterNet = netip.MustParsePrefix(clusterCIDR)
)

// env is what every configuration shares: the underlay, the control plane
// and the CNI plugin directories.
type env struct {
	ctx context.Context
	o   *options
	dir string
	h   *netops.Handle
	cs  kubernetes.Interface
	kc  string // the kubeconfig the node namespaces use
	kcp string // the control plane's directory
	seq int    // configurations set up so far

	cniboxBin, anchorBin string // CNI plugin directories, made on first use
}

func newEnv(ctx context.Context, o *options) (*env, error) {
	dir, err := os.MkdirTemp("", "cnibox-bench-datapath-")
	if err != nil {
		return nil, err
	}
	e := &env{ctx: ctx, o: o, dir: dir}
	if e.h, err = netops.Open(""); err != nil {
		return e, err
	}
	if _, err := e.h.EnsureBridge(netops.BridgeOpts{Name: underlayBridge}); err != nil {
		return e, err
	}
	if err := e.h.EnsureAddr(underlayBridge, underlayGW, netops.AddrOpts{NoDAD: true}); err != nil {
		return e, err
	}
	if !e.needsKube() {
		return e, nil
	}
	e.kcp = filepath.Join(dir, "kcp")
	cmd := exec.Command("bash", o.kcp, "start", e.kcp, clusterCIDR, "24")
	cmd.Env = append(os.Environ(), "KCP_BIND=0.0.0.0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return e, fmt.Errorf("start the control plane: %v\n%s", err, out)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", filepath.Join(e.kcp, "kubeconfig"))
	if err != nil {
		return e, err
	}
	rc.QPS, rc.Burst = 1000, 1000
	if e.cs, err = kubernetes.NewForConfig(rc); err != nil {
		return e, err
	}
	kc, err := os.ReadFile(filepath.Join(e.kcp, "kubeconfig"))
	if err != nil {
		return e, err
	}
	e.kc = filepath.Join(dir, "kubeconfig-nodes")
	nodeKC := strings.ReplaceAll(string(kc), "127.0.0.1:"+apiPort, underlayGW.Addr().String()+":"+apiPort)
	o.logf("control plane up")
	return e, os.WriteFile(e.kc, []byte(nodeKC), 0o600)
}

// needsKube reports whether any configuration runs an agent.
func (e *env) needsKube() bool {
	for _, n := range e.o.configs {
		if configByName(n).kind != floorKind {
			return true
		}
	}
	return false
}

func (e *env) close() {
	if e.kcp != "" {
		exec.Command("bash", e.o.kcp, "stop", e.kcp).Run()
	}
	if e.h != nil {
		e.h.DeleteLink(underlayBridge)
		e.h.Close()
	}
	os.RemoveAll(e.dir)
}

// pluginDir returns the CNI plugin directory of a side: cnibox's roles
// (cnibox install), or the anchor's flannel plugin and reference plugins
// as links.
func (e *env) pluginDir(k kind) (string, error) {
	if k == cniboxKind {
		if e.cniboxBin == "" {
			dir := filepath.Join(e.dir, "cnibox-bin")
			if out, err := exec.Command(e.o.cnibox, "install", "--dir", dir).CombinedOutput(); err != nil {
				return "", fmt.Errorf("cnibox install: %v: %s", err, out)
			}
			e.cniboxBin = dir
		}
		return e.cniboxBin, nil
	}
	if e.anchorBin == "" {
		dir := filepath.Join(e.dir, "anchor-bin")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		fdir, err := anchorDirs()
		if err != nil {
			return "", err
		}
		links := map[string]string{"flannel": filepath.Join(fdir[0], "flannel")}
		for _, p := range refPlugins {
			links[p] = filepath.Join(fdir[1], p)
		}
		for name, target := range links {
			if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
				return "", err
			}
		}
		e.anchorBin = dir
	}
	return e.anchorBin, nil
}

// waitFor polls ok every 100 ms until it says true, its error, the
// context's end or timeout.
func (e *env) waitFor(what string, timeout time.Duration, ok func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		done, err := ok()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if done {
			return nil
		}
		if e.ctx.Err() != nil {
			return fmt.Errorf("%s: %w", what, e.ctx.Err())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not after %v", what, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
