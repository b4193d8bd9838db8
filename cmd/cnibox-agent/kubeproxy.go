//go:build !nokube

package main

import (
	"log/slog"
	"slices"
	"strings"

	"github.com/cnibox/cnibox/netops/nft"
)

// kubeProxyLeftovers is what the Services proxy does about kube-proxy's
// rules on the node (docs/deploy.md, moving a node off kube-proxy): after
// each full sync of the services table, with --cleanup-kube-proxy it
// removes them as `kube-proxy --cleanup` does; without, it warns while
// they are there (two proxies: the first NAT hook to pick a connection's
// endpoint wins). Only after a sync: cnibox's table is in before
// kube-proxy's goes, so no new connection finds no proxy and the
// established ones keep the kernel's NAT hooks. Used from the syncer's
// goroutine only.
type kubeProxyLeftovers struct {
	h       *nft.Handle
	cleanup bool
	log     *slog.Logger
	warned  []string // what the last warning named
}

// check looks for kube-proxy's leftovers, and removes them with cleanup.
func (k *kubeProxyLeftovers) check() {
	if k.cleanup {
		gone, err := k.h.CleanupKubeProxy()
		if err != nil {
			k.log.Error("services: --cleanup-kube-proxy: kube-proxy's leftovers not removed; tried again at the next full sync", "err", err)
			return
		}
		if len(gone) > 0 {
			k.log.Info("services: --cleanup-kube-proxy removed kube-proxy's leftovers; this node's Services are cnibox's alone", "removed", names(gone))
		}
		return
	}
	ls, err := k.h.KubeProxyLeftovers()
	if err != nil {
		k.log.Warn("services: cannot look for kube-proxy's leftovers", "err", err)
		return
	}
	var n []string
	for _, l := range ls {
		if l.Chain == "" || l.Handle == 0 && (l.Chain == "KUBE-SERVICES" || l.Chain == "KUBE-NODEPORTS") {
			n = append(n, l.String())
		}
	}
	if len(n) > 0 && !slices.Equal(n, k.warned) {
		k.log.Warn("services: kube-proxy's rules serve this node's Services too; once its DaemonSet is gone, remove them with --cleanup-kube-proxy or `cnibox cleanup kube-proxy` (docs/deploy.md)",
			"kube-proxy", strings.Join(n, ", "))
	}
	k.warned = n
}

// names are ls as nft names them.
func names(ls []nft.KubeProxyLeftover) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.String()
	}
	return out
}
