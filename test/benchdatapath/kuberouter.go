package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/nftables"

	"github.com/cnibox/cnibox/test/internal/benchnode"
	"github.com/cnibox/cnibox/test/internal/kuberouter"
)

// startKubeRouter runs kube-router's policy controller on n beside
// flanneld, as k3s does: the firewall only (no routing, no service
// proxy), against the bench's API server, with the node's name. It needs
// br_netfilter's call into iptables for bridged (same-node) traffic, which
// a new namespace has on.
func (in *instance) startKubeRouter(n *node) error {
	bin, err := kuberouter.Binary() // the parent built it: its path is in the environment
	if err != nil {
		return err
	}
	p, err := benchnode.Start(benchnode.StartOpts{Bin: bin, NS: n.Path, Log: filepath.Join(n.dir, "kube-router.log"),
		Args: []string{"--run-firewall=true", "--run-router=false", "--run-service-proxy=false",
			"--kubeconfig=" + in.e.kc, "--hostname-override=" + n.name, "--health-port=0", "--metrics-port=0", "-v=1"}})
	if err != nil {
		return fmt.Errorf("kube-router: %w", err)
	}
	n.policyAgent = p
	in.procs = append(in.procs, p)
	return nil
}

// kubeRouterChains counts kube-router's NetworkPolicy chains (one
// KUBE-NWPLCY-<hash> per policy, iptables-nft's filter table) in the
// namespace at path, its default chain aside.
func kubeRouterChains(path string) (int, error) {
	return countChains(path, "filter", "KUBE-NWPLCY-", "KUBE-NWPLCY-DEFAULT")
}

// countChains counts the chains of table whose names start with prefix,
// but for the one named except.
func countChains(path, table, prefix, except string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	conn, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		return 0, err
	}
	defer conn.CloseLasting()
	chains, err := conn.ListChains()
	if err != nil {
		return 0, err
	}
	k := 0
	for _, ch := range chains {
		if ch.Table.Name == table && strings.HasPrefix(ch.Name, prefix) && ch.Name != except {
			k++
		}
	}
	return k, nil
}
